import { readdir } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyBaseLogger } from 'fastify';
import { errorCode } from '../lib/errors.ts';
import type { Database } from './db.ts';

// A deploy whose migrations were not run answered /health 200 while the
// routes that need a newer table or function failed with 500. The start says
// so instead: the migration files shipped beside the code against the
// versions the database has applied (public.applied_migration_versions).
// A warning, not a refusal: some deploys run the migrations after the code.
// A database ahead of the code (an earlier release rolled back onto it) is
// warned of too: the newer migrations may refuse what this build does.

/** A migration's file name: its version (the digits before the first `_`) and its name. The runner (scripts/stack/database.ts) reads them the same way. */
export const MIGRATION_FILE = /^(\d+)_(.+)\.sql$/;

/** Where supabase/migrations is looked for: beside the sources (from src/plugins) or beside the build (from dist/src/plugins). */
const MIGRATION_DIRECTORIES = ['../..', '../../..'].map((up) => path.resolve(import.meta.dirname, up, 'supabase/migrations'));

/** The migration files beside the code, sorted; undefined when there are none (the directory not shipped, or empty). */
async function migrationFiles(): Promise<string[] | undefined> {
  for (const directory of MIGRATION_DIRECTORIES) {
    const files = await readdir(directory).catch(() => undefined);
    if (files) {
      const migrations = files.filter((file) => MIGRATION_FILE.test(file)).sort();
      return migrations.length > 0 ? migrations : undefined;
    }
  }
  return undefined;
}

/**
 * The start's warning when there is nothing to compare the database with: an
 * image built without supabase/migrations. Without it an unmigrated database
 * showed only as failing requests and errors storing log entries.
 */
const MIGRATIONS_NOT_SHIPPED =
  `the database schema cannot be checked against the code: no migration files in ${MIGRATION_DIRECTORIES.join(' or ')}; ` +
  'an unmigrated database will show only as failing requests: ship supabase/migrations with the build (docs/deploy.md, What an image must contain)';

/** Why the database's schema is behind the migration files, or ahead of them; undefined when neither (or there are no files to tell by). */
export async function schemaMismatch(db: Database, files?: readonly string[]): Promise<string | undefined> {
  files ??= await migrationFiles();
  if (!files) return undefined;
  let applied: Set<string>;
  try {
    const rows = await db.sql<{ version: string }[]>`select version from public.applied_migration_versions() as version`;
    applied = new Set(rows.map((row) => row.version));
  } catch (error) {
    // 42883: no such function, so the database predates the migration that made it.
    if (errorCode(error) === '42883') return 'the database schema is behind the code (it has no public.applied_migration_versions): run npm run migrate';
    throw error;
  }
  const missing = files.filter((file) => !applied.has(MIGRATION_FILE.exec(file)![1]));
  if (missing.length > 0) {
    const named = missing.length > 3 ? `${missing.slice(0, 3).join(', ')} and ${missing.length - 3} more` : missing.join(', ');
    return `the database schema is behind the code: ${missing.length} migration${missing.length === 1 ? '' : 's'} not applied (${named}): run npm run migrate`;
  }
  const newestFile = files.map((file) => BigInt(MIGRATION_FILE.exec(file)![1])).reduce((top, version) => (version > top ? version : top));
  const newer = [...applied].filter((version) => /^\d+$/.test(version) && BigInt(version) > newestFile).sort((a, b) => (BigInt(a) < BigInt(b) ? -1 : 1));
  if (newer.length === 0) return undefined;
  return `the database schema is ahead of the code: ${newer.length} migration${newer.length === 1 ? '' : 's'} applied that this release does not have (newest ${newer.at(-1)}): an earlier build on a migrated database may have requests refused (README, Upgrading)`;
}

/** Logs, once, whether the schema is behind or ahead, or that it cannot be told; a database that cannot be asked now is left to the routes' own errors. */
export async function warnIfSchemaMismatched(db: Database, log: FastifyBaseLogger): Promise<void> {
  const files = await migrationFiles();
  if (!files) {
    log.warn(MIGRATIONS_NOT_SHIPPED);
    return;
  }
  try {
    const mismatch = await schemaMismatch(db, files);
    if (mismatch) log.warn(mismatch);
  } catch (error) {
    log.debug({ err: error }, 'schema check: the database could not be asked');
  }
}
