import postgres from 'postgres';
import { describe, expect, inject, it } from 'vitest';
import { DatabaseServerError, localPostgresUrl, startStack, uniqueDatabaseName } from '../scripts/stack/index.ts';

// The local stack that cannot start says why in one line, which npm run dev
// prints as it is.

describe('the local stack on a PostgreSQL login that is no superuser', () => {
  it('may create its database but not bootstrap the platform: one DatabaseServerError naming LOCAL_POSTGRES_URL', async () => {
    const server = postgres(inject('stack').postgresUrl, { max: 1, onnotice: () => {} });
    const role = `stack_createdb_${Math.random().toString(36).slice(2, 8)}`;
    const databaseName = uniqueDatabaseName('portfolio_nosuper');
    await server.unsafe(`create role ${role} login createdb`);
    try {
      const url = new URL(inject('stack').postgresUrl);
      url.username = role;
      const started = startStack({ postgresUrl: url.toString(), databaseName, keepDatabase: false });
      await expect(started).rejects.toBeInstanceOf(DatabaseServerError);
      await expect(started).rejects.toThrowError(
        new RegExp(`^PostgreSQL at ${url.host} refused the platform bootstrap of ${databaseName}: permission denied .* \\(LOCAL_POSTGRES_URL must name a superuser\\)$`),
      );
      // The database it made for itself is gone with it.
      expect(await server`select datname from pg_database where datname = ${databaseName}`).toEqual([]);
    } finally {
      await server.unsafe(`drop database if exists ${databaseName} with (force)`);
      await server.unsafe(`drop role ${role}`);
      await server.end();
    }
  });
});

describe('LOCAL_POSTGRES_URL that no client can read', () => {
  it('is one DatabaseServerError naming the variable, never echoing the value (it may hold a password)', () => {
    for (const value of ['postgres://postgres:SuperSecretPW@127.0.0.1:54x/postgres', 'notaurl', 'postgres://u:Secret%zz@127.0.0.1/postgres']) {
      let thrown: unknown;
      try {
        localPostgresUrl({ LOCAL_POSTGRES_URL: value });
      } catch (error) {
        thrown = error;
      }
      expect(thrown, value).toBeInstanceOf(DatabaseServerError);
      expect((thrown as Error).message, value).toMatch(/^LOCAL_POSTGRES_URL must be a URL such as postgres:\/\/user:password@host:5432\/database/);
      expect((thrown as Error).message).not.toContain('Secret');
    }
    expect(localPostgresUrl({ LOCAL_POSTGRES_URL: ' postgres://postgres@127.0.0.1:6543/postgres ' })).toBe('postgres://postgres@127.0.0.1:6543/postgres');
    expect(localPostgresUrl({})).toBe('postgres://postgres@127.0.0.1:5432/postgres');
  });
});
