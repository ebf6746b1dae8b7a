import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import { connectDatabase, type Database } from '../src/plugins/db.ts';
import { schemaMismatch } from '../src/plugins/db-schema.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { usePrivateDatabase } from './support/private-database.ts';

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
