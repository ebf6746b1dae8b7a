import { spawn } from 'node:child_process';
import { isIPv6 } from 'node:net';
import path from 'node:path';
import { ConfigError, DEFAULT_CORS_ORIGIN, parseSettings } from '../src/config.ts';
import { checkServerConfig, DEV_PORTS, devSecrets, rateLimitNote, serverEnv, withFrontEnd, withStack } from './dev-env.ts';
import { AUTH_BIN_VARIABLE, AuthBinaryError, findAuthBinary } from './stack/auth-server.ts';
import { MigrationError, ROOT } from './stack/database.ts';
import { ensurePortFree } from './stack/free-port.ts';
import { DatabaseServerError, startStack, type Stack } from './stack/index.ts';
import { DEV_DATABASE, grantRoleCommand } from './owner-hint.ts';
import { serviceNodeFlags } from './service-flags.ts';

// `npm run dev`: with no hosted Supabase configured, starts the local stack
// (database portfolio_dev, SMTP sink, Supabase Auth behind its gateway when a
// binary is given, the test OIDC issuer), applies migrations, then runs the
// API and prints where everything is, as `supabase status` does. Ctrl-C
// stops everything it started.

/**
 * Where the API answers, as a browser opens it: a wildcard HOST (0.0.0.0, ::)
 * is no address to browse to, so the loopback one stands for it and `note`
 * says it listens on all interfaces.
 */
export function apiAddress(host: string, port: number): { base: string; note?: string } {
  const wildcard = host === '0.0.0.0' || host === '::';
  const shown = wildcard ? (host === '::' ? '::1' : '127.0.0.1') : host;
  const base = `http://${isIPv6(shown) ? `[${shown}]` : shown}:${port}`;
  return wildcard ? { base, note: `listening on all interfaces, HOST=${host}` } : { base };
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
  if (error instanceof ConfigError || error instanceof AuthBinaryError || error instanceof MigrationError || error instanceof DatabaseServerError) {
    return error.message;
  }
  const { code, port, address } = error as NodeJS.ErrnoException & { port?: number; address?: string };
  if (code !== 'EADDRINUSE' || port === undefined) return undefined;
  const [what, advice] =
    port === apiPort
      ? ['the API, PORT', 'stop what listens there, or set PORT']
      : [DEV_PORT_NAMES[port] ?? 'the local stack', 'stop what listens there (another npm run dev, or supabase start?)'];
  return `port ${port} on ${address} is taken (${what}): ${advice}`;
}

/**
 * What `npm run dev` says when SUPABASE_URL and DATABASE_URL are set: it uses
 * that project and starts no local stack, which otherwise goes unsaid (and a
 * .env holding the stack's own printed values then points at a gateway that
 * nothing runs: sign-in answers 503, id-token finds no issuer).
 */
export function configuredProjectLines(supabaseUrl: string): string[] {
  const lines = [`SUPABASE_URL and DATABASE_URL are set: using that project (${supabaseUrl}); the local stack is not started.`];
  const url = new URL(supabaseUrl);
  const loopback = ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
  if (loopback && Number(url.port) === DEV_PORTS.gateway) {
    lines.push(
      `  SUPABASE_URL is the local stack's own auth gateway (port ${DEV_PORTS.gateway}), which nothing starts now: unset both (in .env or the environment) for npm run dev to start the local stack.`,
    );
  }
  return lines;
}

async function main() {
  const given = serverEnv(process.env);
  let env = given;
  let port = 3000;
  let host = '127.0.0.1';
  let stack: Stack | undefined;
  const status: [string, string][] = [];

  try {
    // Read through the service's parser; `env` itself goes to the server, which parses all of it.
    const settings = parseSettings(given, ['SUPABASE_URL', 'DATABASE_URL', 'PORT', 'HOST', 'FRONTEND_URL', 'CORS_ORIGIN']);
    port = settings.PORT ?? port;
    host = settings.HOST ?? host;
    if (settings.SUPABASE_URL && !settings.DATABASE_URL) {
      console.error('npm run dev: SUPABASE_URL is set but DATABASE_URL is not: give the project database URL too (see .env.example).');
      process.exit(1);
    }
    const frontEnd = { FRONTEND_URL: settings.FRONTEND_URL, CORS_ORIGIN: settings.CORS_ORIGIN ?? DEFAULT_CORS_ORIGIN };
    const local = !settings.SUPABASE_URL;
    const binary = local ? findAuthBinary(env) : undefined;
    // Checked before anything starts: the server would find them only once
    // the stack is up and the banner printed.
    checkServerConfig(env, local ? { auth: binary !== undefined } : undefined);
    if (settings.SUPABASE_URL) console.log(configuredProjectLines(settings.SUPABASE_URL).join('\n'));
    await ensurePortFree(port, host);
    if (local) {
      console.log('No SUPABASE_URL set: starting the local stack.');
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
              adjust: (auth) => withFrontEnd(auth, frontEnd),
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
        ['Admin JWT secret', `${env.ADMIN_JWT_SECRET}   (ADMIN_JWT_SECRET; npm run -s admin-token -- <userId> signs with it)`],
        ['Mail sink', `${stack.mail.apiUrl}/messages   (SMTP on 127.0.0.1:${stack.mail.smtpPort})`],
        ['Database', `${env.DATABASE_URL}   (DATABASE_URL, the API's login role)`],
        ['Database owner', `${env.DATABASE_OWNER_URL}   (DATABASE_OWNER_URL: migrations, grant-role, revoke-role)`],
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
  const { base, note } = apiAddress(host, port);
  const lines: [string, string][] = [
    ['API', `${base}   (${note ? `${note}; ` : ''}GET /health; every API route in /docs)`],
    ['API docs', `${base}/docs`],
    // The one setting a front end must match: a page from another origin (127.0.0.1 for localhost, another port) is refused by the browser.
    ['Front end', `${env.CORS_ORIGIN ?? DEFAULT_CORS_ORIGIN}   (CORS_ORIGIN: the one origin browsers may call from; ${rateLimitNote(env)})`],
    [
      'Dashboard',
      stack && !stack.auth
        ? `${base}/admin/status   (signing in needs accounts, and so Supabase Auth)`
        : `${base}/admin/status   (first admin: sign up, then ${grantRoleCommand(given, stack?.databaseUrl)})`,
    ],
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
