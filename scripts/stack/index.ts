import { randomBytes } from 'node:crypto';
import { postgresUrl } from '../../src/config-fields.ts';
import { type AuthServer, type AuthServerOptions, startAuthServer } from './auth-server.ts';
import { applyMigrations, applyPlatform, createDatabase, databaseUrl, dropDatabase } from './database.ts';
import { LOCAL_POSTGRES_VARIABLE, stackEnvironment } from './environment.ts';
import { type MailSink, startMailSink } from './mail-sink.ts';
import { type AuthSettings, readAuthSettings } from './supabase-config.ts';

// The local stack that `npm run dev` and `npm test` start: a database of the
// project's own on the machine's PostgreSQL with the Supabase platform
// bootstrap, an SMTP sink, Supabase Auth when a binary is given (its own
// migrations, then ours, as on a hosted project), and our migrations.

const DEFAULT_POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/postgres';
export { LOCAL_POSTGRES_VARIABLE } from './environment.ts';

/** The stack's PostgreSQL server did not answer, or refused to make its database. */
export class DatabaseServerError extends Error {}

/**
 * The PostgreSQL server the stack makes its database on: LOCAL_POSTGRES_URL,
 * else the machine's own on 5432. One the driver cannot read is refused here,
 * in one line without the value: the driver's own error printed it, password
 * and all.
 */
export function localPostgresUrl(env: NodeJS.ProcessEnv = stackEnvironment()): string {
  const url = env[LOCAL_POSTGRES_VARIABLE]?.trim() || DEFAULT_POSTGRES_URL;
  const checked = postgresUrl.safeParse(url);
  if (!checked.success) throw new DatabaseServerError(`${LOCAL_POSTGRES_VARIABLE} ${checked.error.issues[0].message}`);
  return url;
}

export interface StackOptions {
  /** Server-level URL (any database) of a superuser; the stack makes its own database on it. Defaults to localPostgresUrl(). */
  postgresUrl?: string;
  /** Defaults to a fresh, uniquely named database that stop() drops. */
  databaseName?: string;
  keepDatabase?: boolean;
  smtpPort?: number;
  mailApiPort?: number;
  /**
   * Run Supabase Auth from this binary, signing tokens with jwtSecret, with the
   * settings of supabase/config.toml (`adjust` may change them, e.g. a benchmark's limits).
   */
  auth?: Pick<AuthServerOptions, 'binary' | 'jwtSecret' | 'gatewayPort' | 'oidc'> & { adjust?: (settings: AuthSettings) => AuthSettings };
  log?: (line: string) => void;
}

export interface Stack {
  databaseName: string;
  databaseUrl: string;
  postgresUrl: string;
  mail: MailSink;
  auth?: AuthServer;
  stop(): Promise<void>;
}

export function uniqueDatabaseName(prefix = 'portfolio_test'): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}`;
}

export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const log = options.log ?? (() => {});
  const postgresUrl = options.postgresUrl ?? localPostgresUrl();
  const databaseName = options.databaseName ?? uniqueDatabaseName();
  const keepDatabase = options.keepDatabase ?? options.databaseName !== undefined;
  const url = databaseUrl(postgresUrl, databaseName);
  // A stack that does not start leaves no database of its own behind (each
  // test run's is new, and a run that failed left one per try).
  const dropOwnDatabase = async () => {
    if (!keepDatabase) await dropDatabase(postgresUrl, databaseName).catch(() => {});
  };

  try {
    await createDatabase(postgresUrl, databaseName, { recreate: !keepDatabase });
  } catch (error) {
    throw new DatabaseServerError(
      `PostgreSQL at ${new URL(postgresUrl).host} is not reachable or refused to create ${databaseName}: ${(error as Error).message} (${LOCAL_POSTGRES_VARIABLE} names another server)`,
    );
  }
  try {
    await applyPlatform(url);
  } catch (error) {
    await dropOwnDatabase();
    // The bootstrap makes the platform's roles and schemas: only a superuser may.
    throw new DatabaseServerError(
      `PostgreSQL at ${new URL(postgresUrl).host} refused the platform bootstrap of ${databaseName}: ${(error as Error).message} (${LOCAL_POSTGRES_VARIABLE} must name a superuser)`,
    );
  }

  let mail: MailSink | undefined;
  let auth: AuthServer | undefined;
  try {
    mail = await startMailSink({ smtpPort: options.smtpPort, apiPort: options.mailApiPort });
    log(`SMTP sink on 127.0.0.1:${mail.smtpPort}, messages at ${mail.apiUrl}/messages`);
    if (options.auth) {
      const { adjust = (settings: AuthSettings) => settings, ...given } = options.auth;
      auth = await startAuthServer({
        ...given,
        databaseUrl: url,
        settings: adjust(await readAuthSettings()),
        smtp: { host: '127.0.0.1', port: mail.smtpPort },
        log,
      });
    }
    const applied = await applyMigrations(url);
    log(`database ${databaseName}: platform bootstrap applied, ${applied.length} new migration(s)`);
  } catch (error) {
    // What did start is stopped; a failure to stop it does not hide why the start failed.
    await auth?.stop().catch(() => {});
    await mail?.stop().catch(() => {});
    await dropOwnDatabase();
    throw error;
  }

  return {
    databaseName,
    databaseUrl: url,
    postgresUrl,
    mail,
    auth,
    async stop() {
      await auth?.stop();
      await mail.stop();
      if (!keepDatabase) await dropDatabase(postgresUrl, databaseName);
    },
  };
}
