import { readdirSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import { connectDatabase, type Database } from '../src/plugins/db.ts';
import { schemaBehind } from '../src/plugins/db-schema.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// A deploy that forgot its migrations: the start says the schema is behind
// the code, naming what is not applied, instead of a green /health over routes
// that fail. Asked as the API's own login role, in a database of this file's own.

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
    expect(await schemaBehind(db)).toBeUndefined();
  });

  it('names the migrations the database has not applied', async () => {
    await unrecord(newest);
    expect(await schemaBehind(db)).toBe(`the database schema is behind the code: 1 migration not applied (${newest}): run npm run migrate`);
    await unrecord(secondNewest);
    expect(await schemaBehind(db)).toBe(`the database schema is behind the code: 2 migrations not applied (${secondNewest}, ${newest}): run npm run migrate`);
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
    expect(await schemaBehind(db)).toBe('the database schema is behind the code (it has no public.applied_migration_versions): run npm run migrate');
  });
});
