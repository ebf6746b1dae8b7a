import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { loadModule, parseSync } from 'libpg-query';
import postgres from 'postgres';
import { beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { applyMigrations, MIGRATION_HISTORY_DDL, MIGRATIONS_DIR } from '../scripts/stack/database.ts';
import { MIGRATION_FILE } from '../src/plugins/db-schema.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// supabase/migrations must apply unchanged under the Supabase CLI (README,
// Using hosted Supabase), and since 2.115 the CLI applies a file differently
// from `npm run migrate`: cut after each top-level `;`, its statements go out
// in one pipeline (Parse, Bind, Execute each, one Sync) with no BEGIN
// (supabase/cli#6347). PostgreSQL runs that as one implicit transaction that
// is no transaction block, so a statement that needs one (a top-level LOCK
// TABLE) fails, and with it that migration and every later one. Here each
// file goes out so, through the patched driver's chain (one write, one Sync;
// tests/database-chain.test.ts).
//
// The file is cut where PostgreSQL's own parser (libpg-query) ends each
// statement, not by the CLI's tokenizer. The two cut our files alike, but
// not every file: the CLI's skips the character after a backslash outside a
// string, and reads `(` in a function body its own way. A migration using
// either should be checked under the CLI itself.

beforeAll(async () => {
  await loadModule();
});

/** The file cut as the CLI cuts it (after each top-level `;`, that `;` and the space around it trimmed), at the `;` PostgreSQL's parser finds. */
function cutAsTheCliDoes(body: string): string[] {
  // PostgreSQL's locations count bytes of UTF-8, not characters.
  const bytes = Buffer.from(body, 'utf8');
  const ends = (parseSync(body).stmts ?? []).map((statement) => (statement.stmt_location ?? 0) + (statement.stmt_len ?? 0));
  const pieces: string[] = [];
  let start = 0;
  for (const end of ends) {
    if (bytes[end] !== 0x3b) continue;
    pieces.push(bytes.subarray(start, end).toString('utf8'));
    start = end + 1;
  }
  pieces.push(bytes.subarray(start).toString('utf8'));
  return pieces.map((piece) => piece.trim()).filter((piece) => piece !== '');
}

/** Whether a piece holds a statement (not only comments): the CLI sends those, PostgreSQL answers them with nothing. */
const holdsStatement = (piece: string) => (parseSync(piece).stmts ?? []).length > 0;

async function scratchDatabase(): Promise<{ url: string; sql: postgres.Sql }> {
  const database = await createPrivateDatabase('cli_apply', { migrated: false });
  const sql = postgres(database.url, { max: 1, onnotice: () => {} });
  onTestFinished(async () => {
    await sql.end({ timeout: 5 });
    await database.drop();
  });
  await sql.unsafe(MIGRATION_HISTORY_DDL);
  return { url: database.url, sql };
}

/** One migration as the CLI applies it: its statements in one pipeline, no BEGIN; then its history row. */
async function applyAsTheCliDoes(sql: postgres.Sql, file: string, body: string): Promise<void> {
  const statements = cutAsTheCliDoes(body);
  const connection = await sql.reserve();
  try {
    connection.chain();
    const outcomes = await Promise.allSettled(
      statements.filter(holdsStatement).map((statement) => connection.unsafe(statement, [], { prepare: false, simple: false } as postgres.UnsafeQueryOptions)),
    );
    const refused = outcomes.find((outcome) => outcome.status === 'rejected');
    if (refused) throw new Error(`${file}: ${String(refused.reason)}`);
  } finally {
    connection.release();
  }
  const [, version, name] = MIGRATION_FILE.exec(file)!;
  await sql`insert into supabase_migrations.schema_migrations (version, statements, name) values (${version}, ${statements}, ${name})`;
}

describe('supabase/migrations under the Supabase CLI (2.115 and later)', () => {
  it('every migration applies with its statements pipelined outside a transaction block, and `npm run migrate` then agrees with that history', async () => {
    const { url, sql } = await scratchDatabase();
    const files = (await readdir(MIGRATIONS_DIR)).filter((file) => file.endsWith('.sql')).sort();
    for (const file of files) await applyAsTheCliDoes(sql, file, await readFile(path.join(MIGRATIONS_DIR, file), 'utf8'));

    const [{ recorded }] = await sql`select count(*)::int as recorded from supabase_migrations.schema_migrations`;
    expect(recorded).toBe(files.length);
    // The last migration's work is there: the chain ran each file whole.
    const [{ found }] = await sql`select to_regprocedure('public.applied_migration_versions()') is not null as found`;
    expect(found).toBe(true);
    // Our runner reads the CLI's split history as the files it has: nothing to apply, nothing refused.
    await expect(applyMigrations(url)).resolves.toEqual([]);
  });

  it('a statement that needs a transaction block fails there, as it does under the CLI (the check can fail)', async () => {
    const { sql } = await scratchDatabase();
    await expect(applyAsTheCliDoes(sql, '29991231000000_lock_at_top_level.sql', 'create table public.cli_probe (x int);\nlock table public.cli_probe in share row exclusive mode;\n')).rejects.toThrow(
      /LOCK TABLE can only be used in transaction blocks/,
    );
    // The pipeline was one transaction: the table made before the refused statement is gone with it.
    const [{ found }] = await sql`select to_regclass('public.cli_probe') is not null as found`;
    expect(found).toBe(false);
  });
});
