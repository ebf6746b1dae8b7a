import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { withoutEmptyValues } from '../src/config.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { scriptSettings } from './settings.ts';
import { AUTH_BIN_VARIABLE, findAuthBinary } from './stack/auth-server.ts';
import { ROOT } from './stack/database.ts';
import { startStack, type Stack } from './stack/index.ts';
import { serviceNodeFlags } from './service-flags.ts';

// `npm run dev`: with no hosted Supabase configured, starts the local stack
// (database portfolio_dev, SMTP sink, Supabase Auth behind its gateway when a
// binary is given, the test OIDC issuer), applies migrations, then runs the
// API and prints where everything is, as `supabase status` does. Ctrl-C
// stops everything it started.

const DEV_DATABASE = 'portfolio_dev';
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

async function main() {
  // Unset NODE_ENV means production (src/config.ts); this command is for development.
  // A variable set to nothing in .env (as .env.example leaves many) is unset, so the stack fills it.
  const env: NodeJS.ProcessEnv = { NODE_ENV: 'development', ...withoutEmptyValues(process.env) };
  // Read through the service's parser; `env` itself goes to the server, which parses all of it.
  const given = scriptSettings(['SUPABASE_URL', 'DATABASE_URL', 'PORT', 'HOST']);
  let stack: Stack | undefined;
  const status: [string, string][] = [];

  if (!given.SUPABASE_URL) {
    console.log('No SUPABASE_URL set: starting the local stack.');
    const secrets = await devSecrets();
    const binary = findAuthBinary(env);
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
    env.SUPABASE_JWT_SECRET ??= secrets.SUPABASE_JWT_SECRET;
    env.ADMIN_JWT_SECRET ??= secrets.ADMIN_JWT_SECRET;
    env.ANALYTICS_SALT_SECRET ??= secrets.ANALYTICS_SALT_SECRET;
    // The API logs in as `authenticator` (only anon, authenticated, service_role);
    // the stack migrated as the owner, and owner-level scripts use DATABASE_OWNER_URL.
    env.DATABASE_URL ??= asLoginRole(stack.databaseUrl);
    env.DATABASE_OWNER_URL ??= stack.databaseUrl;
    env.SMTP_URL ??= `smtp://127.0.0.1:${stack.mail.smtpPort}`;
    // A fresh local database has no admin yet: notifications go to this address in the sink.
    env.FEEDBACK_NOTIFY_EMAILS ??= 'admin@portfolio.local';
    if (stack.auth) {
      env.SUPABASE_URL = stack.auth.url;
      env.SUPABASE_ANON_KEY = stack.auth.anonKey;
      env.SUPABASE_SERVICE_ROLE_KEY = stack.auth.serviceRoleKey;
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
  } else if (!given.DATABASE_URL) {
    console.error('SUPABASE_URL is set but DATABASE_URL is not: give the project database URL too (see .env.example).');
    process.exit(1);
  }

  const { PORT: port, HOST: host } = given;
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
