import postgres from 'postgres';
import { afterAll, beforeAll, inject } from 'vitest';
import { applyMigrations, applyPlatform, createDatabase, databaseUrl, dropDatabase } from '../../scripts/stack/database.ts';
import { uniqueDatabaseName } from '../../scripts/stack/index.ts';

// A database of one test file's own, for rules about the whole table that a
// shared database cannot show (e.g. "there is always one admin" while other
// files grant admin concurrently). Same bootstrap and migrations as the stack.

/** `migrated: false` leaves out our migrations, for a test that applies them its own way. */
export async function createPrivateDatabase(label = 'private', { migrated = true } = {}): Promise<{ url: string; drop(): Promise<void> }> {
  const { postgresUrl } = inject('stack');
  const name = uniqueDatabaseName(`portfolio_${label}`);
  await createDatabase(postgresUrl, name);
  const url = databaseUrl(postgresUrl, name);
  await applyPlatform(url);
  if (migrated) await applyMigrations(url);
  return { url, drop: () => dropDatabase(postgresUrl, name) };
}

/**
 * A private database for a whole test file: made before its tests, dropped
 * after them. `sql` is a superuser connection to it with `max` connections.
 */
export function usePrivateDatabase(label: string, { max = 2 } = {}): { readonly url: string; readonly sql: postgres.Sql } {
  let database: Awaited<ReturnType<typeof createPrivateDatabase>> | undefined;
  let sql: postgres.Sql | undefined;
  beforeAll(async () => {
    database = await createPrivateDatabase(label);
    sql = postgres(database.url, { max, onnotice: () => {} });
  });
  afterAll(async () => {
    await sql?.end();
    await database?.drop();
  });
  return {
    get url() {
      if (!database) throw new Error('the private database is made in beforeAll');
      return database.url;
    },
    get sql() {
      if (!sql) throw new Error('the private database is made in beforeAll');
      return sql;
    },
  };
}
