import postgres from 'postgres';
import { describe, expect, inject, it } from 'vitest';
import { DatabaseServerError, startStack, uniqueDatabaseName } from '../scripts/stack/index.ts';

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
    } finally {
      await server.unsafe(`drop database if exists ${databaseName} with (force)`);
      await server.unsafe(`drop role ${role}`);
      await server.end();
    }
  });
});
