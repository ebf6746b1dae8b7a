import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { cp, mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { connectDatabase, type Database } from '../src/plugins/db.ts';
import { schemaMismatch } from '../src/plugins/db-schema.ts';
import { buildTestAppWithLog, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/app.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { usePrivateDatabase } from './support/private-database.ts';
import { exitWithin, type SpawnedServer, untilHealthy } from './support/spawned-server.ts';

// A deploy that forgot its migrations: the start says the schema is behind
// the code, naming what is not applied, instead of a green /health over routes
// that fail; a rollback onto a database a later release migrated says it is
// ahead. Asked as the API's own login role, in a database of this file's own.

const private_ = usePrivateDatabase('schema');
const files = readdirSync(path.resolve(import.meta.dirname, '../supabase/migrations')).filter((file) => file.endsWith('.sql')).sort();
const [newest, secondNewest] = [files.at(-1)!, files.at(-2)!];
const versionOf = (file: string) => file.split('_')[0];

let db: Database;
beforeAll(() => {
  db = connectDatabase(asLoginRole(private_.url), { max: 1 });
});
afterAll(async () => db?.close(1_000));

async function unrecord(file: string): Promise<void> {
  await private_.sql`delete from supabase_migrations.schema_migrations where version = ${versionOf(file)}`;
}

describe('the schema check at the start', () => {
  it('says nothing when every migration file is applied', async () => {
    expect(await schemaMismatch(db)).toBeUndefined();
  });

  it('says the schema is ahead when the database has migrations newer than every file, naming the newest, and an app logs it once', async () => {
    const later = ['29991231000000', '29991231000001'];
    for (const version of later) await private_.sql`insert into supabase_migrations.schema_migrations (version, name) values (${version}, 'from_a_later_release')`;
    try {
      const ahead = 'the database schema is ahead of the code: 2 migrations applied that this release does not have (newest 29991231000001)';
      expect(await schemaMismatch(db)).toBe(`${ahead}: an earlier build on a migrated database may have requests refused (README, Upgrading)`);
      const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: private_.url });
      try {
        const entry = await waitFor(() => lines.map((line) => JSON.parse(line)).find((line) => String(line.msg).startsWith('the database schema is')), 10_000, 'the warning');
        expect(entry).toMatchObject({ level: 40, msg: expect.stringContaining(ahead) });
        expect(lines.filter((line) => line.includes('schema is ahead'))).toHaveLength(1);
      } finally {
        await app.close();
      }
    } finally {
      await private_.sql`delete from supabase_migrations.schema_migrations where version in ${private_.sql(later)}`;
    }
    expect(await schemaMismatch(db)).toBeUndefined();
  });

  it('names the migrations the database has not applied', async () => {
    await unrecord(newest);
    expect(await schemaMismatch(db)).toBe(`the database schema is behind the code: 1 migration not applied (${newest}): run npm run migrate`);
    await unrecord(secondNewest);
    expect(await schemaMismatch(db)).toBe(`the database schema is behind the code: 2 migrations not applied (${secondNewest}, ${newest}): run npm run migrate`);
  });

  it('an app started on that database logs it once, as a warning', async () => {
    const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: private_.url });
    try {
      const entry = await waitFor(() => lines.map((line) => JSON.parse(line)).find((line) => String(line.msg).startsWith('the database schema is behind')), 10_000, 'the warning');
      expect(entry).toMatchObject({ level: 40, msg: expect.stringContaining(`2 migrations not applied (${secondNewest}, ${newest})`) });
      expect(lines.filter((line) => line.includes('schema is behind'))).toHaveLength(1);
    } finally {
      await app.close();
    }
  });

  it('a database older than the check itself is behind too', async () => {
    await private_.sql`drop function public.applied_migration_versions()`;
    expect(await schemaMismatch(db)).toBe('the database schema is behind the code (it has no public.applied_migration_versions): run npm run migrate');
  });
});

describe('an image built without supabase/migrations', () => {
  it('a production start says once that the schema cannot be checked, and how to ship the migrations; it serves all the same', { timeout: 90_000 }, async () => {
    // The server's sources and package.json beside this checkout's packages, as an image that left out supabase/.
    const root = path.resolve(import.meta.dirname, '..');
    const copy = await mkdtemp(path.join(tmpdir(), 'start-without-migrations-'));
    let server: SpawnedServer | undefined;
    try {
      for (const part of ['package.json', 'src']) await cp(path.join(root, part), path.join(copy, part), { recursive: true });
      await symlink(path.join(root, 'node_modules'), path.join(copy, 'node_modules'));
      const port = await freePort();
      const env = {
        NODE_ENV: 'production',
        LOG_LEVEL: 'info',
        PORT: String(port),
        DATABASE_URL: asLoginRole(inject('stack').databaseUrl),
        SUPABASE_JWT_SECRET: TEST_JWT_SECRET,
        ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
        ANALYTICS_SALT_SECRET: 'analytics-salt-secret-0123456789abcdef-0123',
        CAPTCHA_PROVIDER: 'off',
      };
      const child = spawn(process.execPath, [path.join(copy, 'src/server.ts')], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      server = { child, exited: new Promise((resolve) => child.on('exit', resolve)), output: () => output };
      expect((await untilHealthy(server, `http://127.0.0.1:${port}`, 60_000)).status).toBe(200);
      const entries = () => output.trim().split('\n').map((line) => JSON.parse(line) as { level: number; msg: string });
      const cannotCheck = () => entries().filter((entry) => entry.msg.startsWith('the database schema cannot be checked'));
      await waitFor(() => cannotCheck()[0], 10_000, 'the warning');
      expect(cannotCheck()).toEqual([
        expect.objectContaining({
          level: 40,
          msg:
            `the database schema cannot be checked against the code: no migration files in ${path.join(copy, 'supabase/migrations')} or ${path.join(path.dirname(copy), 'supabase/migrations')}; ` +
            'an unmigrated database will show only as failing requests: ship supabase/migrations with the build (docs/deploy.md, What an image must contain)',
        }),
      ]);
      expect(entries().filter((entry) => entry.msg.startsWith('the database schema is'))).toEqual([]);
    } finally {
      if (server && server.child.exitCode === null) {
        server.child.kill('SIGTERM');
        await exitWithin(server, 15_000);
      }
      await rm(copy, { recursive: true, force: true });
    }
  });
});
