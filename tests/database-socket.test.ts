import { existsSync } from 'node:fs';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { applyMigrations } from '../scripts/stack/database.ts';
import { parseConfig } from '../src/config.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { connectDatabase } from '../src/plugins/db.ts';

// A DATABASE_URL that names PostgreSQL's Unix socket as libpq does: the
// directory as the host, percent-encoded, or as a `host` parameter. The
// driver alone looked the first up in DNS and sent the second to the server,
// which refused it; both reach the socket, for the API and for the scripts.

const databaseUrl = inject('stack').databaseUrl;
const database = new URL(databaseUrl).pathname.slice(1);
let socketDirectory = '';

beforeAll(async () => {
  const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
  try {
    const [row] = await sql`select current_setting('unix_socket_directories') as directories, current_setting('port') as port`;
    socketDirectory = (row.directories as string).split(',')[0].trim();
    // The stack's server is this machine's: its socket must be here.
    expect(existsSync(path.join(socketDirectory, `.s.PGSQL.${row.port}`)), `socket in ${socketDirectory}`).toBe(true);
  } finally {
    await sql.end();
  }
});

describe('a DATABASE_URL naming a Unix socket', () => {
  // Functions: the socket's directory is known only once beforeAll has asked the server.
  const forms = {
    'the host, percent-encoded': () => `postgres://authenticator@${encodeURIComponent(socketDirectory)}/${database}`,
    'a host parameter': () => `${asLoginRole(databaseUrl)}?host=${encodeURIComponent(socketDirectory)}`,
  };
  const opened: ReturnType<typeof connectDatabase>[] = [];
  afterAll(() => Promise.all(opened.map((db) => db.close())));

  for (const [form, urlOf] of Object.entries(forms)) {
    it(`connects the API over the socket: ${form}`, async () => {
      const url = urlOf();
      expect(parseConfig({ NODE_ENV: 'development', DATABASE_URL: url }).DATABASE_URL).toBe(url);
      const db = connectDatabase(url, { max: 1 });
      opened.push(db);
      // inet_server_addr() is null on a Unix-socket connection.
      const [row] = await db.sql`select inet_server_addr() as address, current_database() as database, session_user as login`;
      expect(row).toEqual({ address: null, database, login: 'authenticator' });
      const [actor] = await db.readAtOnceAsActor({ role: 'anon' }, (tx) => tx`select current_user as role`);
      expect(actor.role).toBe('anon');
    });
  }

  it('the owner runs migrations over it (npm run migrate, grant-role)', async () => {
    const owner = new URL(databaseUrl).username;
    expect(await applyMigrations(`postgres://${owner}@${encodeURIComponent(socketDirectory)}/${database}`)).toEqual([]);
  });
});
