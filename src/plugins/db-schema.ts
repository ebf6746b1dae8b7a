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

/** A migration's file name: its version (the digits before the first `_`) and its name. The runner (scripts/stack/database.ts) reads them the same way. */
export const MIGRATION_FILE = /^(\d+)_(.+)\.sql$/;

/** supabase/migrations beside the code: from src/plugins (sources) or dist/src/plugins (compiled); undefined when not shipped. */
async function migrationFiles(): Promise<string[] | undefined> {
  for (const up of ['../..', '../../..']) {
    const directory = path.resolve(import.meta.dirname, up, 'supabase/migrations');
    const files = await readdir(directory).catch(() => undefined);
    if (files) return files.filter((file) => MIGRATION_FILE.test(file)).sort();
  }
  return undefined;
}

/** Why the database's schema is behind the migration files, or undefined when it is not (or cannot be told). */
export async function schemaBehind(db: Database): Promise<string | undefined> {
  const files = await migrationFiles();
  if (!files || files.length === 0) return undefined;
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
  if (missing.length === 0) return undefined;
  const named = missing.length > 3 ? `${missing.slice(0, 3).join(', ')} and ${missing.length - 3} more` : missing.join(', ');
  return `the database schema is behind the code: ${missing.length} migration${missing.length === 1 ? '' : 's'} not applied (${named}): run npm run migrate`;
}

/** Logs, once, whether the schema is behind; a database that cannot be asked now is left to the routes' own errors. */
export async function warnIfSchemaBehind(db: Database, log: FastifyBaseLogger): Promise<void> {
  try {
    const behind = await schemaBehind(db);
    if (behind) log.warn(behind);
  } catch (error) {
    log.debug({ err: error }, 'schema check: the database could not be asked');
  }
}
