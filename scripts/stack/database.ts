import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import type postgres from 'postgres';
import { connectPostgres } from '../../src/lib/database-url.ts';
import { MIGRATION_FILE } from '../../src/plugins/db-schema.ts';

// Creates the project's own database on the machine's PostgreSQL, gives it
// what the Supabase platform provides (supabase/local/platform.sql), and
// applies supabase/migrations in order, recording them where the Supabase CLI
// does (supabase_migrations.schema_migrations). A landed migration is never
// edited (README, Layout; AMENDED_MIGRATIONS is the one exception), so a
// history that disagrees with the files stops the run instead of being
// skipped over.

export const ROOT = path.resolve(import.meta.dirname, '../..');
export const MIGRATIONS_DIR = path.join(ROOT, 'supabase/migrations');
/** Where the Supabase CLI records the migrations applied, in the columns it writes; made if missing. */
export const MIGRATION_HISTORY_DDL = `
  create schema if not exists supabase_migrations;
  create table if not exists supabase_migrations.schema_migrations (
    version text primary key, statements text[], name text
  );`;
const PLATFORM_SQL = path.join(ROOT, 'supabase/local/platform.sql');

export function databaseUrl(serverUrl: string, name: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return url.toString();
}

function quoteIdent(name: string): string {
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`unsafe database name: ${name}`);
  return `"${name}"`;
}

async function withServer<T>(serverUrl: string, work: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = connectPostgres(serverUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 });
  try {
    return await work(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export async function createDatabase(serverUrl: string, name: string, { recreate = false } = {}): Promise<void> {
  await withServer(serverUrl, async (sql) => {
    const [existing] = await sql`select 1 as found from pg_database where datname = ${name}`;
    if (existing && !recreate) return;
    if (existing) await sql.unsafe(`drop database ${quoteIdent(name)} with (force)`);
    await sql.unsafe(`create database ${quoteIdent(name)}`);
  });
}

export async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  await withServer(serverUrl, (sql) => sql.unsafe(`drop database if exists ${quoteIdent(name)} with (force)`));
}

/**
 * The platform's roles are the server's, not the database's: two bootstraps
 * at once (two test runs starting together) failed with `tuple concurrently
 * updated`. They take turns under an advisory lock held in the `postgres`
 * database, since advisory locks are per database.
 */
export async function applyPlatform(url: string): Promise<void> {
  const turns = connectPostgres(databaseUrl(url, 'postgres'), { max: 1, onnotice: () => {} });
  const sql = connectPostgres(url, { max: 1, onnotice: () => {} });
  try {
    await turns`select pg_advisory_lock(hashtext('portfolio: platform bootstrap'))`;
    await sql.unsafe(await readFile(PLATFORM_SQL, 'utf8'));
  } finally {
    await sql.end({ timeout: 5 });
    // Ending the session gives the lock back.
    await turns.end({ timeout: 5 });
  }
}

/** Why a run stopped: a migration failed (rolled back), or the recorded history disagrees with the files (nothing applied). */
export class MigrationError extends Error {
  readonly file: string;
  /** What this run applied before the failure, each committed. */
  readonly applied: readonly string[];

  constructor(file: string, message: string, applied: readonly string[] = [], options?: ErrorOptions) {
    super(message, options);
    this.file = file;
    this.applied = [...applied];
  }

  static failed(file: string, applied: readonly string[], cause: unknown): MigrationError {
    return new MigrationError(file, `${file} failed (rolled back): ${cause instanceof Error ? cause.message : String(cause)}`, applied, { cause });
  }
}

interface MigrationFile {
  file: string;
  version: string;
  name: string;
  body: string;
}

interface RecordedMigration {
  version: string;
  name: string | null;
  statements: string[] | null;
}

// Any constant will do as long as every run uses the same one; it names this
// runner's lock among the database's other advisory locks.
const MIGRATION_LOCK_KEY = 2026_1121_0001;

async function readMigrations(directory: string): Promise<MigrationFile[]> {
  const files = (await readdir(directory)).filter((file) => MIGRATION_FILE.test(file)).sort();
  return Promise.all(
    files.map(async (file) => {
      const [, version, name] = MIGRATION_FILE.exec(file)!;
      return { file, version, name, body: await readFile(path.join(directory, file), 'utf8') };
    }),
  );
}

// `statements` holds the whole file when this runner applied it, and the file
// split into statements when `supabase db push` did (pkg/parser SplitAndTrim:
// cut after each top-level ';', that ';' and the surrounding space trimmed, so
// no element starts or ends with space or ends with ';'). A whole file is
// compared exactly; split statements are compared with the file with space and
// empty statements around every ';' removed on both sides, which is all the
// split changes (so an edit of only the space around a ';' goes unnoticed).
const withoutSplitSpace = (text: string) => text.replace(/\s*;[\s;]*/g, ';').replace(/^[\s;]+|[\s;]+$/g, '');

/** The recorded statements as text to compare, and whether they are a whole file (else split, compared without split space). */
function recordedText(stored: readonly string[]): { text: string; whole: boolean } {
  const [only] = stored;
  if (stored.length === 1 && (only !== only.trim() || only.endsWith(';'))) return { text: only, whole: true };
  return { text: withoutSplitSpace(stored.join(';')), whole: false };
}

function sameBody(stored: readonly string[], body: string): boolean {
  const { text, whole } = recordedText(stored);
  return text === (whole ? body : withoutSplitSpace(body));
}

/**
 * Migrations amended after they landed, each with the SHA-256 of the body it
 * had before, whole and without split space (as sameBody compares them): a
 * database that recorded the earlier body was migrated by it, and is not
 * refused for the amendment. Only for a change in how a statement is sent,
 * never in what the migration does.
 *
 * 20261127100000: its `lock table` moved into a `do` block. Supabase CLI
 * 2.115 and later send a file's statements in one pipeline without BEGIN,
 * where PostgreSQL refuses a top-level LOCK TABLE (25P01, "can only be used
 * in transaction blocks"; supabase/cli#6347), and that migration, and every
 * later one, failed under `supabase db reset`, `supabase start` and `db push`.
 */
const AMENDED_MIGRATIONS = new Map<string, readonly string[]>([
  ['20261127100000', ['bac9cd92f592e4d76d812a5d2325b0ffc64d9bc0749a365f528d0869dfd82312', '3c8c789c3f4d5019e2184e1be317346e9cb25510b3d5a1c7e7253b261b68c29c']],
]);

function amendedFrom(version: string, stored: readonly string[]): boolean {
  const earlier = AMENDED_MIGRATIONS.get(version);
  if (!earlier) return false;
  return earlier.includes(createHash('sha256').update(recordedText(stored).text).digest('hex'));
}

/**
 * What is wrong between the recorded migrations and the files, one sentence
 * each, naming the migration; empty when the files can be applied as they are.
 * `ahead`: the recorded migrations newer than every file, when that is the
 * only difference (each file applied): a database migrated by a later
 * release, which an older one may be rolled back onto. They are not problems.
 */
function migrationHistoryProblems(files: readonly MigrationFile[], recorded: readonly RecordedMigration[], where: string) {
  const problems: { file: string; message: string }[] = [];
  const byVersion = new Map<string, MigrationFile>();
  const shared = new Set<string>();
  for (const migration of files) {
    const first = byVersion.get(migration.version);
    if (first) {
      shared.add(migration.version);
      problems.push({ file: migration.file, message: `Migrations ${first.file} and ${migration.file} share version ${migration.version}; give the one added later a version of its own` });
    } else {
      byVersion.set(migration.version, migration);
    }
  }
  const recordedFile = (row: RecordedMigration) => (row.name === null ? row.version : `${row.version}_${row.name}.sql`);
  const done = new Set(recorded.map((row) => row.version));
  const withoutFile = recorded.filter((row) => !byVersion.has(row.version) && !shared.has(row.version));
  const newestFile = files.reduce<bigint | undefined>((top, migration) => (top !== undefined && top >= BigInt(migration.version) ? top : BigInt(migration.version)), undefined);
  // Only a history that runs past the files' end, over all of them, is a later
  // release's: one missing in the middle, or a file never applied, means a
  // migration edited away or a database from another branch.
  const isAhead =
    withoutFile.length > 0 &&
    newestFile !== undefined &&
    withoutFile.every((row) => BigInt(row.version) > newestFile) &&
    [...byVersion.keys()].every((version) => done.has(version));
  for (const row of recorded) {
    const migration = byVersion.get(row.version);
    if (shared.has(row.version)) continue;
    if (!migration) {
      if (isAhead) continue;
      // Failing, not warning: the database holds changes no file describes, so
      // a fresh database built from these files would differ from this one
      // (a migration deleted or renumbered after it was applied, or a database
      // migrated from another branch).
      problems.push({ file: recordedFile(row), message: `Migration ${recordedFile(row)} is recorded as applied but has no file in ${where}; restore the file, or recreate a database migrated from another branch` });
    } else if (row.name !== null && row.name !== migration.name) {
      problems.push({ file: migration.file, message: `Migration ${recordedFile(row)} was applied, but its version now belongs to ${migration.file}; an applied migration keeps its file: put the change in a new migration` });
    } else if (row.statements !== null && !sameBody(row.statements, migration.body) && !amendedFrom(row.version, row.statements)) {
      problems.push({ file: migration.file, message: `Migration ${migration.file} was changed after it was applied; add a new migration instead` });
    }
  }
  const newest = recorded.reduce<RecordedMigration | undefined>((top, row) => (top && BigInt(top.version) >= BigInt(row.version) ? top : row), undefined);
  for (const migration of byVersion.values()) {
    if (newest && !done.has(migration.version) && BigInt(migration.version) < BigInt(newest.version)) {
      problems.push({ file: migration.file, message: `Migration ${migration.file} was never applied and is older than ${recordedFile(newest)}, which was; give it a version after ${newest.version}` });
    }
  }
  return { problems, ahead: isAhead ? withoutFile.map(recordedFile) : [] };
}

export interface MigrateOptions {
  directory?: string;
  /** Told the migrations the database has that are newer than every file (oldest first), when it has such and nothing else differs. */
  onAhead?: (newer: readonly string[]) => void;
}

/**
 * Applies the migrations not yet recorded; returns the names it applied.
 * First checks the recorded history against the files and applies nothing
 * when they disagree; a database ahead of the files (a rollback to an
 * earlier release) is no disagreement: nothing to apply, and `onAhead` hears of it.
 * Runs against one database take turns.
 */
export async function applyMigrations(url: string, { directory = MIGRATIONS_DIR, onAhead }: MigrateOptions = {}): Promise<string[]> {
  const migrations = await readMigrations(directory);
  const where = directory === MIGRATIONS_DIR ? 'supabase/migrations' : directory;
  const sql = connectPostgres(url, { max: 1, onnotice: () => {} });
  const applied: string[] = [];
  try {
    // Session-level, so it is held across the migrations' own transactions
    // (one connection: max 1) and released when the connection ends. A run
    // started meanwhile waits here, then finds the migrations recorded.
    await sql.unsafe(`select pg_advisory_lock(${MIGRATION_LOCK_KEY})`);
    await sql.unsafe(MIGRATION_HISTORY_DDL);
    const recorded = await sql<RecordedMigration[]>`select version, name, statements from supabase_migrations.schema_migrations order by version`;
    const { problems, ahead } = migrationHistoryProblems(migrations, recorded, where);
    const [problem, ...more] = problems;
    if (problem) {
      const others = more.length ? ` (and ${more.length} more: ${more.map((other) => other.file).join(', ')})` : '';
      throw new MigrationError(problem.file, `${problem.message}${others}`);
    }
    if (ahead.length > 0) onAhead?.(ahead);
    const done = new Set(recorded.map((row) => row.version));
    for (const { file, version, name, body } of migrations) {
      if (done.has(version)) continue;
      try {
        await sql.begin(async (tx) => {
          await tx.unsafe(body);
          await tx`insert into supabase_migrations.schema_migrations (version, statements, name)
                   values (${version}, ${[body]}, ${name})`;
        });
      } catch (error) {
        throw MigrationError.failed(file, applied, error);
      }
      applied.push(file);
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
  return applied;
}
