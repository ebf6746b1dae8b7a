import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { withoutEmptyValues } from '../src/config.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { scriptSettings } from './settings.ts';
import { AUTH_BIN_VARIABLE, AuthBinaryError, type AuthServer, findAuthBinary } from './stack/auth-server.ts';
import { databaseUrl, MigrationError, ROOT } from './stack/database.ts';
import { ensurePortFree } from './stack/free-port.ts';
import { DatabaseServerError, localPostgresUrl, startStack, type Stack } from './stack/index.ts';
import type { MailSink } from './stack/mail-sink.ts';
import { serviceNodeFlags } from './service-flags.ts';

// `npm run dev`: with no hosted Supabase configured, starts the local stack
// (database portfolio_dev, SMTP sink, Supabase Auth behind its gateway when a
// binary is given, the test OIDC issuer), applies migrations, then runs the
// API and prints where everything is, as `supabase status` does. Ctrl-C
// stops everything it started.

const DEV_DATABASE = 'portfolio_dev';
/** The local stack's database as its owner (DATABASE_OWNER_URL unless .env says otherwise); grant-role's default. */
export function devOwnerUrl(env: NodeJS.ProcessEnv = process.env): string {
  return databaseUrl(localPostgresUrl(env), DEV_DATABASE);
}
/** The ports `supabase start` uses, so URLs look the same with either. */
export const DEV_PORTS = { gateway: 54321, mailApi: 54324, smtp: 54325, oidcIssuer: 54326 };
export const SECRETS_FILE = path.join(ROOT, '.cache/dev-secrets.json');

export interface DevSecrets {
  SUPABASE_JWT_SECRET: string;
  ADMIN_JWT_SECRET: string;
  ANALYTICS_SALT_SECRET: string;
  OIDC_CLIENT_SECRET: string;
}

/** Secrets for the local stack, made once and kept in the git-ignored cache. */
export async function devSecrets(): Promise<DevSecrets> {
  const fresh = (): DevSecrets => ({
    SUPABASE_JWT_SECRET: randomBytes(32).toString('hex'),
    ADMIN_JWT_SECRET: randomBytes(32).toString('hex'),
    ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
    OIDC_CLIENT_SECRET: randomBytes(24).toString('hex'),
  });
  let kept: Partial<DevSecrets> = {};
  try {
    kept = JSON.parse(await readFile(SECRETS_FILE, 'utf8'));
  } catch {
    // First run: made below.
  }
  const secrets = { ...fresh(), ...kept };
  if (Object.keys(kept).length !== Object.keys(secrets).length) {
    await mkdir(path.dirname(SECRETS_FILE), { recursive: true });
    await writeFile(SECRETS_FILE, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  }
  return secrets;
}

/**
 * The server's environment before the stack fills it: development unless
 * .env says otherwise (unset NODE_ENV means production, src/config.ts); a
 * variable set to nothing (as .env.example leaves many) is unset.
 */
export function serverEnv(given: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { NODE_ENV: 'development', ...withoutEmptyValues(given) };
}

/** What of the local stack the API's environment takes. */
export interface StackValues {
  databaseUrl: string;
  mail: Pick<MailSink, 'smtpPort'>;
  auth?: Pick<AuthServer, 'url' | 'anonKey' | 'serviceRoleKey' | 'jwtSecret'>;
}

/**
 * `env` with the local stack's values where .env left them empty. The stack's
 * database replaces whatever .env gives (it is the one the stack migrated, and
 * the one its auth server writes accounts to), and so do the stack's own auth
 * server's URL, keys and JWT secret (a hosted project's, left over): it signs
 * every token with its secret, and an API verifying with another answers each
 * one 401. `overridden` names the variables whose .env value was replaced.
 */
export function withStack(env: NodeJS.ProcessEnv, stack: StackValues, secrets: DevSecrets): { env: NodeJS.ProcessEnv; overridden: string[] } {
  const filled = { ...env };
  const overridden: string[] = [];
  const fromStack: Record<string, string> = {
    // The API logs in as `authenticator` (only anon, authenticated, service_role);
    // the stack migrated as the owner, and owner-level scripts use DATABASE_OWNER_URL.
    DATABASE_URL: asLoginRole(stack.databaseUrl),
    DATABASE_OWNER_URL: stack.databaseUrl,
    ...(stack.auth && {
      SUPABASE_URL: stack.auth.url,
      SUPABASE_ANON_KEY: stack.auth.anonKey,
      SUPABASE_SERVICE_ROLE_KEY: stack.auth.serviceRoleKey,
      SUPABASE_JWT_SECRET: stack.auth.jwtSecret,
    }),
  };
  for (const [name, value] of Object.entries(fromStack)) {
    if (filled[name] !== undefined && filled[name] !== value) overridden.push(name);
    filled[name] = value;
  }
  // Without an auth server no token is issued here: a secret .env gives may stay.
  filled.SUPABASE_JWT_SECRET ??= secrets.SUPABASE_JWT_SECRET;
  filled.ADMIN_JWT_SECRET ??= secrets.ADMIN_JWT_SECRET;
  filled.ANALYTICS_SALT_SECRET ??= secrets.ANALYTICS_SALT_SECRET;
  filled.SMTP_URL ??= `smtp://127.0.0.1:${stack.mail.smtpPort}`;
  // A fresh local database has no admin yet: notifications go to this address in the sink.
  filled.FEEDBACK_NOTIFY_EMAILS ??= 'admin@portfolio.local';
  return { env: filled, overridden };
}

/** What listens on each of the stack's fixed ports, for the line a taken one ends `npm run dev` with. */
const DEV_PORT_NAMES: Record<number, string> = {
  [DEV_PORTS.gateway]: "the local stack's auth gateway",
  [DEV_PORTS.mailApi]: "the local stack's mail sink API",
  [DEV_PORTS.smtp]: "the local stack's SMTP sink",
  [DEV_PORTS.oidcIssuer]: "the local stack's OIDC issuer",
};

/** The one line a failure we can explain ends `npm run dev` with; undefined for any other (a bug: its stack trace helps). */
function failureLine(error: unknown, apiPort: number): string | undefined {
  if (error instanceof AuthBinaryError || error instanceof MigrationError || error instanceof DatabaseServerError) return error.message;
  const { code, port, address } = error as NodeJS.ErrnoException & { port?: number; address?: string };
  if (code !== 'EADDRINUSE' || port === undefined) return undefined;
  const [what, advice] =
    port === apiPort
      ? ['the API, PORT', 'stop what listens there, or set PORT']
      : [DEV_PORT_NAMES[port] ?? 'the local stack', 'stop what listens there (another npm run dev, or supabase start?)'];
  return `port ${port} on ${address} is taken (${what}): ${advice}`;
}

async function main() {
  let env = serverEnv(process.env);
  // Read through the service's parser; `env` itself goes to the server, which parses all of it.
  const given = scriptSettings(['SUPABASE_URL', 'DATABASE_URL', 'PORT', 'HOST']);
  const { PORT: port = 3000, HOST: host = '127.0.0.1' } = given;
  let stack: Stack | undefined;
  const status: [string, string][] = [];

  if (given.SUPABASE_URL && !given.DATABASE_URL) {
    console.error('SUPABASE_URL is set but DATABASE_URL is not: give the project database URL too (see .env.example).');
    process.exit(1);
  }
  try {
    // Checked before anything starts: the server would find it taken only
    // once the stack is up, and say so with a stack trace.
    await ensurePortFree(port, host);
    if (!given.SUPABASE_URL) {
      console.log('No SUPABASE_URL set: starting the local stack.');
      const binary = findAuthBinary(env);
      const secrets = await devSecrets();
      stack = await startStack({
        databaseName: DEV_DATABASE,
        keepDatabase: true,
        smtpPort: DEV_PORTS.smtp,
        mailApiPort: DEV_PORTS.mailApi,
        auth: binary
          ? {
              binary,
              jwtSecret: secrets.SUPABASE_JWT_SECRET,
              gatewayPort: DEV_PORTS.gateway,
              oidc: { port: DEV_PORTS.oidcIssuer, clientSecret: secrets.OIDC_CLIENT_SECRET },
            }
          : undefined,
        log: (line) => console.log(`  ${line}`),
      });
      const filled = withStack(env, stack, secrets);
      env = filled.env;
      if (filled.overridden.length) {
        console.log(`  ${filled.overridden.join(', ')} from .env replaced by the local stack's (set SUPABASE_URL and DATABASE_URL to use a hosted project instead).`);
      }
      if (stack.auth) {
        status.push(
          ['Auth URL', `${stack.auth.url}/auth/v1   (SUPABASE_URL ${stack.auth.url})`],
          ['anon key', stack.auth.anonKey],
          ['service_role key', stack.auth.serviceRoleKey],
          ['JWT secret', stack.auth.jwtSecret],
          ['OIDC issuer', `${stack.auth.oidc.issuer}   (the keycloak provider; npm run id-token -- <email>)`],
        );
      } else {
        console.log(`  Supabase Auth not found: set ${AUTH_BIN_VARIABLE} or put gotrue on the PATH (README); /api/auth routes answer 503.`);
      }
      status.push(
        ['Admin JWT secret', `${env.ADMIN_JWT_SECRET}   (ADMIN_JWT_SECRET; npm run admin-token -- <userId> signs with it)`],
        ['Mail sink', `${stack.mail.apiUrl}/messages   (SMTP on 127.0.0.1:${stack.mail.smtpPort})`],
        ['Database', `${env.DATABASE_URL}   (DATABASE_URL, the API's login role)`],
        ['Database owner', `${env.DATABASE_OWNER_URL}   (DATABASE_OWNER_URL: migrations, grant-role)`],
      );
    }
  } catch (error) {
    // What started goes first (startStack stops its own parts when it fails midway).
    await stack?.stop();
    const line = failureLine(error, port);
    if (!line) throw error;
    console.error(`npm run dev: ${line}`);
    process.exit(1);
  }

  const server = spawn(process.execPath, [...serviceNodeFlags(), path.join(ROOT, 'src/server.ts')], { env, stdio: 'inherit' });
  const base = `http://${host}:${port}`;
  const lines: [string, string][] = [
    ['API', base],
    ['API docs', `${base}/docs`],
    ['Dashboard', `${base}/admin/status   (first admin: npm run grant-role -- <email> admin)`],
    ...status,
  ];
  const width = Math.max(...lines.map(([name]) => name.length));
  console.log(['', ...lines.map(([name, value]) => `  ${name.padEnd(width)}  ${value}`), ''].join('\n'));

  let stopping = false;
  const stop = async (code: number) => {
    if (stopping) return;
    stopping = true;
    if (server.exitCode === null) {
      server.kill('SIGTERM');
      await new Promise((resolve) => server.once('exit', resolve));
    }
    await stack?.stop();
    process.exit(code);
  };
  process.on('SIGINT', () => void stop(0));
  process.on('SIGTERM', () => void stop(0));
  server.on('exit', (code) => void stop(code ?? 1));
}

if (import.meta.main) await main();
