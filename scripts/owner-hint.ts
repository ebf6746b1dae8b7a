import { scriptSettings } from './settings.ts';
import { databaseUrl } from './stack/database.ts';

// The scripts that write as the schema's owner (migrate, grant-role, revoke-role): which
// database they write to, the command `npm run dev` shows for the first admin,
// and the end of a refusal for want of the owner's rights, saying what to set
// (the usual cause is a .env whose DATABASE_URL is the API's login role and no
// DATABASE_OWNER_URL).

/** `npm run dev`'s database on the local PostgreSQL server. */
export const DEV_DATABASE = 'portfolio_dev';

/** The local stack's database as its owner, on its PostgreSQL server (`localPostgres`): what `npm run dev` gives as DATABASE_OWNER_URL. */
export function devOwnerUrl(localPostgres: string): string {
  return databaseUrl(localPostgres, DEV_DATABASE);
}

/**
 * The local stack's module, loaded only when a script falls back to `npm run
 * dev`'s database. Loaded up front it made migrate and grant-role need the
 * stack's dev dependencies (oidc-provider, smtp-server) even with
 * DATABASE_OWNER_URL set, so an image installed with `npm ci --omit=dev`
 * could not run its own migrations. When they are absent: the package missing.
 */
async function localStack(): Promise<typeof import('./stack/index.ts') | { missing: string }> {
  try {
    return await import('./stack/index.ts');
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'ERR_MODULE_NOT_FOUND') throw error;
    return { missing: /Cannot find (?:package|module) '([^']+)'/.exec((error as Error).message)?.[1] ?? 'a package' };
  }
}

/**
 * The owner's connection: DATABASE_OWNER_URL, else DATABASE_URL, else `npm run
 * dev`'s local database, which `say` reports in one line. `npm run dev`
 * without a .env sends a developer to these scripts from a shell that has
 * none of its environment, and its database is the one meant. Where the dev
 * dependencies are not installed there is no `npm run dev`: exit 2 with a line
 * saying to set DATABASE_OWNER_URL.
 */
export async function ownerDatabaseUrl(env: NodeJS.ProcessEnv = process.env, say: (line: string) => void = console.error): Promise<string> {
  const settings = scriptSettings(['DATABASE_OWNER_URL', 'DATABASE_URL'], env);
  const given = settings.DATABASE_OWNER_URL ?? settings.DATABASE_URL;
  if (given) return given;
  const stack = await localStack();
  if ('missing' in stack) {
    say(`DATABASE_OWNER_URL and DATABASE_URL are not set, and npm run dev's local stack is not installed here (no ${stack.missing}: dev dependencies omitted): set DATABASE_OWNER_URL to the database's owner`);
    process.exit(2);
  }
  const url = devOwnerUrl(stack.localPostgresUrl(env));
  say(`DATABASE_OWNER_URL and DATABASE_URL are not set: using npm run dev's local database, ${url}`);
  return url;
}

/** Postgres refused for want of rights (SQLSTATE 42501: permission denied, must be owner), itself or as a cause. */
function lacksRights(error: unknown): boolean {
  for (let cause = error; cause instanceof Error; cause = cause.cause) {
    if ((cause as { code?: unknown }).code === '42501') return true;
  }
  return false;
}

/** The end of a script's one error line: what to set when `error` is such a refusal, else nothing. `needs`: "migrations need". */
export function ownerHint(error: unknown, needs: string): string {
  return lacksRights(error) ? `; ${needs} the owner: set DATABASE_OWNER_URL (DATABASE_URL is the API's login role)` : '';
}

/**
 * The command that makes the first admin in the database `npm run dev` runs
 * the API on: the local stack's, as its owner (`ownerUrl`), or, with a hosted
 * project (undefined), the one .env names. grant-role reads .env (`given`, as
 * it was before dev filled it in): when that names another database, which dev
 * replaced, the command gives the owner's connection itself, and a variable
 * set on the command line wins over .env (scripts/env-file.ts keeps it).
 */
export function grantRoleCommand(given: NodeJS.ProcessEnv, ownerUrl?: string): string {
  const command = 'npm run grant-role -- <email> admin';
  const named = given.DATABASE_OWNER_URL ?? given.DATABASE_URL;
  if (ownerUrl === undefined || named === undefined || named === ownerUrl) return command;
  // Quoted for the shell when a password holds what it would read otherwise.
  const quoted = /^[\w@%+=:,./-]+$/.test(ownerUrl) ? ownerUrl : `'${ownerUrl.replaceAll("'", "'\\''")}'`;
  return `DATABASE_OWNER_URL=${quoted} ${command}`;
}
