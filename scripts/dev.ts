import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { asLoginRole } from '../src/lib/database-url.ts';
import { AuthBuildError, ensureAuthBinary } from './stack/auth-server.ts';
import { ROOT } from './stack/database.ts';
import { startStack, type Stack } from './stack/index.ts';

// `npm run dev`: with no hosted Supabase configured, starts the local stack
// (database portfolio_dev, SMTP sink), applies migrations, then runs the API
// and says where everything is. Ctrl-C stops everything it started.

const DEV_DATABASE = 'portfolio_dev';
const SMTP_PORT = 54325;
const MAIL_API_PORT = 54324;
export const SECRETS_FILE = path.join(ROOT, '.cache/dev-secrets.json');

/** Secrets for the local stack, made once and kept in the git-ignored cache. */
async function devSecrets(): Promise<Record<string, string>> {
  try {
    return JSON.parse(await readFile(SECRETS_FILE, 'utf8'));
  } catch {
    const secrets = {
      SUPABASE_JWT_SECRET: randomBytes(32).toString('hex'),
      ADMIN_JWT_SECRET: randomBytes(32).toString('hex'),
      ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
    };
    await mkdir(path.dirname(SECRETS_FILE), { recursive: true });
    await writeFile(SECRETS_FILE, JSON.stringify(secrets, null, 2), { mode: 0o600 });
    return secrets;
  }
}

async function main() {
  // Unset NODE_ENV means production (src/config.ts); this command is for development.
  const env: NodeJS.ProcessEnv = { NODE_ENV: 'development', ...process.env };
  let stack: Stack | undefined;

  if (!env.SUPABASE_URL) {
    console.log('No SUPABASE_URL set: starting the local stack.');
    stack = await startStack({
      databaseName: DEV_DATABASE,
      keepDatabase: true,
      smtpPort: SMTP_PORT,
      mailApiPort: MAIL_API_PORT,
      log: (line) => console.log(`  ${line}`),
    });
    for (const [name, value] of Object.entries(await devSecrets())) env[name] ??= value;
    // The API logs in as `authenticator` (only anon, authenticated, service_role);
    // the stack migrated as the owner, and owner-level scripts use DATABASE_OWNER_URL.
    env.DATABASE_URL ??= asLoginRole(stack.databaseUrl);
    env.DATABASE_OWNER_URL ??= stack.databaseUrl;
    env.SMTP_URL ??= `smtp://127.0.0.1:${stack.mail.smtpPort}`;
    // A fresh local database has no admin yet: notifications go to this address in the sink.
    env.FEEDBACK_NOTIFY_EMAILS ??= 'admin@portfolio.local';
    try {
      await ensureAuthBinary((line) => console.log(`  ${line}`));
    } catch (error) {
      if (!(error instanceof AuthBuildError)) throw error;
      console.error(
        [
          '',
          '  !! Supabase Auth could not be built, so the local stack runs without it:',
          ...error.message.split('\n').map((line) => `  !!   ${line}`),
          '  !! Routes that need the auth server answer 503. Point SUPABASE_URL at a hosted',
          '  !! project or at `supabase start` (see README) to use them.',
          '',
        ].join('\n'),
      );
    }
  } else if (!env.DATABASE_URL) {
    console.error('SUPABASE_URL is set but DATABASE_URL is not: give the project database URL too (see .env.example).');
    process.exit(1);
  }

  const port = env.PORT ?? '3000';
  const host = env.HOST ?? '127.0.0.1';
  const server = spawn(process.execPath, [path.join(ROOT, 'src/server.ts')], { env, stdio: 'inherit' });
  const base = `http://${host}:${port}`;
  console.log(
    [
      '',
      `  API        ${base}`,
      `  API docs   ${base}/docs`,
      `  Dashboard  ${base}/admin/status   (admin token: npm run admin-token -- <userId>)`,
      stack ? `  Mail sink  ${stack.mail.apiUrl}/messages   (SMTP on 127.0.0.1:${stack.mail.smtpPort})` : '',
      stack ? `  Database   ${stack.databaseUrl}` : '',
      '',
    ]
      .filter((line) => line !== '')
      .join('\n'),
  );

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

await main();
