import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ownerDatabaseUrl } from '../scripts/owner-hint.ts';
import { freePort } from '../scripts/stack/free-port.ts';

// migrate and grant-role write as the owner, to the same database by the same
// rule: DATABASE_OWNER_URL, else DATABASE_URL, else `npm run dev`'s local
// database, which they say in one line. The fallback is run here against a
// server that does not answer, so no developer's portfolio_dev is touched.

const MIGRATE = path.resolve(import.meta.dirname, '../scripts/migrate.ts');

describe('the owner scripts: which database', () => {
  it("DATABASE_OWNER_URL, else DATABASE_URL, else npm run dev's database, said in one line", async () => {
    const said: string[] = [];
    const say = (line: string) => said.push(line);
    const owner = 'postgres://postgres@db.example.com/postgres';
    const login = 'postgres://authenticator@db.example.com/postgres';
    expect(await ownerDatabaseUrl({ DATABASE_OWNER_URL: owner, DATABASE_URL: login }, say)).toBe(owner);
    expect(await ownerDatabaseUrl({ DATABASE_URL: login, DATABASE_OWNER_URL: '' }, say)).toBe(login);
    expect(said).toEqual([]);
    expect(await ownerDatabaseUrl({ LOCAL_POSTGRES_URL: 'postgres://postgres@127.0.0.1:6543/postgres' }, say)).toBe('postgres://postgres@127.0.0.1:6543/portfolio_dev');
    expect(said).toEqual(["DATABASE_OWNER_URL and DATABASE_URL are not set: using npm run dev's local database, postgres://postgres@127.0.0.1:6543/portfolio_dev"]);
  });

  it("npm run migrate with neither set goes to npm run dev's database and says so", async () => {
    // Nothing listens on a port freePort just released.
    const closed = await freePort();
    const child = spawn(process.execPath, [MIGRATE], {
      env: { PATH: process.env.PATH ?? '', LOCAL_POSTGRES_URL: `postgres://postgres@127.0.0.1:${closed}/postgres` },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise((resolve) => child.on('exit', resolve));
    expect(code, stderr).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([
      `DATABASE_OWNER_URL and DATABASE_URL are not set: using npm run dev's local database, postgres://postgres@127.0.0.1:${closed}/portfolio_dev`,
      `npm run migrate: connect ECONNREFUSED 127.0.0.1:${closed}`,
    ]);
  });
});
