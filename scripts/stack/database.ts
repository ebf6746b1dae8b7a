import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import postgres from 'postgres';

// Creates the project's own database on the machine's PostgreSQL, gives it
// what the Supabase platform provides (supabase/local/platform.sql), and
// applies supabase/migrations in order, recording them where the Supabase CLI
// does (supabase_migrations.schema_migrations).

export const ROOT = path.resolve(import.meta.dirname, '../..');
const MIGRATIONS_DIR = path.join(ROOT, 'supabase/migrations');
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
  const sql = postgres(serverUrl, { max: 1, onnotice: () => {}, connect_timeout: 5 });
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

export async function applyPlatform(url: string): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(await readFile(PLATFORM_SQL, 'utf8'));
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** A migration that failed (rolled back), with the ones applied before it in the same run. */
export class MigrationError extends Error {
  readonly file: string;
  readonly applied: readonly string[];

  constructor(file: string, applied: readonly string[], cause: unknown) {
    super(`${file} failed (rolled back): ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.file = file;
    this.applied = [...applied];
  }
}

/** Applies the migrations not yet recorded; returns the names it applied. */
export async function applyMigrations(url: string): Promise<string[]> {
  const files = (await readdir(MIGRATIONS_DIR)).filter((file) => /^\d+_.+\.sql$/.test(file)).sort();
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const applied: string[] = [];
  try {
    await sql.unsafe(`
      create schema if not exists supabase_migrations;
      create table if not exists supabase_migrations.schema_migrations (
        version text primary key, statements text[], name text
      );`);
    const done = new Set((await sql`select version from supabase_migrations.schema_migrations`).map((row) => row.version));
    for (const file of files) {
      const [version, ...rest] = file.replace(/\.sql$/, '').split('_');
      if (done.has(version)) continue;
      const body = await readFile(path.join(MIGRATIONS_DIR, file), 'utf8');
      try {
        await sql.begin(async (tx) => {
          await tx.unsafe(body);
          await tx`insert into supabase_migrations.schema_migrations (version, statements, name)
                   values (${version}, ${[body]}, ${rest.join('_')})`;
        });
      } catch (error) {
        throw new MigrationError(file, applied, error);
      }
      applied.push(file);
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
  return applied;
}
