import { inject } from 'vitest';
import { applyMigrations, applyPlatform, createDatabase, databaseUrl, dropDatabase } from '../../scripts/stack/database.ts';
import { uniqueDatabaseName } from '../../scripts/stack/index.ts';

// A database of one test file's own, for rules about the whole table that a
// shared database cannot show (e.g. "there is always one admin" while other
// files grant admin concurrently). Same bootstrap and migrations as the stack.

export async function createPrivateDatabase(label = 'private'): Promise<{ url: string; drop(): Promise<void> }> {
  const { postgresUrl } = inject('stack');
  const name = uniqueDatabaseName(`portfolio_${label}`);
  await createDatabase(postgresUrl, name);
  const url = databaseUrl(postgresUrl, name);
  await applyPlatform(url);
  await applyMigrations(url);
  return { url, drop: () => dropDatabase(postgresUrl, name) };
}
