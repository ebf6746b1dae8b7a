import { appendFile, cp, mkdtemp, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { describe, expect, inject, it, onTestFinished } from 'vitest';
import { applyMigrations, applyPlatform, createDatabase, databaseUrl, dropDatabase, MIGRATIONS_DIR } from '../scripts/stack/database.ts';
import { uniqueDatabaseName } from '../scripts/stack/index.ts';

// The migration runner checks the recorded history against the files before
// it applies anything: an applied migration is never edited, renamed, reused
// or lost, and a late file cannot slip in below the newest applied version.
// Each test has a database of its own and a copy of supabase/migrations to
// change, so the repository's files are never touched.

interface Scratch {
  url: string;
  sql: postgres.Sql;
  directory: string;
  files: string[];
  migrate(): Promise<string[]>;
  exists(table: string): Promise<boolean>;
  recorded(): Promise<string[]>;
}

async function scratch({ migrated = true } = {}): Promise<Scratch> {
  const { postgresUrl } = inject('stack');
  const name = uniqueDatabaseName('portfolio_migrations');
  await createDatabase(postgresUrl, name);
  const url = databaseUrl(postgresUrl, name);
  const directory = await mkdtemp(path.join(tmpdir(), 'migrations-'));
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  onTestFinished(async () => {
    await sql.end({ timeout: 5 });
    await dropDatabase(postgresUrl, name);
    await rm(directory, { recursive: true, force: true });
  });
  await cp(MIGRATIONS_DIR, directory, { recursive: true });
  await applyPlatform(url);
  const files = (await readdir(directory)).filter((file) => file.endsWith('.sql')).sort();
  const migrate = () => applyMigrations(url, { directory });
  if (migrated) await migrate();
  return {
    url,
    sql,
    directory,
    files,
    migrate,
    exists: async (table) => (await sql`select to_regclass(${table}) as found`)[0].found !== null,
    recorded: async () =>
      (await sql`select version from supabase_migrations.schema_migrations order by version`).map((row) => row.version),
  };
}

const versionOf = (file: string) => file.split('_')[0];
const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** A migration after every existing one, to show that a failed check applies nothing. */
async function addLaterMigration(db: Scratch): Promise<void> {
  await writeFile(path.join(db.directory, '29991231000000_create_later_marker.sql'), 'create table public.later_marker (x int);\n');
}

describe('the platform bootstrap', () => {
  it('runs for several databases at once (two test runs starting together) without a conflict on the shared roles', async () => {
    const { postgresUrl } = inject('stack');
    const names = Array.from({ length: 4 }, () => uniqueDatabaseName('portfolio_bootstrap'));
    onTestFinished(async () => {
      for (const name of names) await dropDatabase(postgresUrl, name);
    });
    for (const name of names) await createDatabase(postgresUrl, name);
    const outcomes = await Promise.allSettled(names.map((name) => applyPlatform(databaseUrl(postgresUrl, name))));
    expect(outcomes.map((outcome) => (outcome.status === 'rejected' ? String(outcome.reason) : 'applied'))).toEqual(names.map(() => 'applied'));
  });
});

describe('applied migrations are checked against their files before anything is applied', () => {
  it('an applied file whose body was edited fails the run, naming it, and applies nothing', async () => {
    const db = await scratch();
    const edited = db.files.at(-1)!;
    await appendFile(path.join(db.directory, edited), '\ncreate table public.audit_marker (x int);\n');
    await addLaterMigration(db);

    await expect(db.migrate()).rejects.toThrow(new RegExp(`^Migration ${escape(edited)} was changed after it was applied`));
    expect(await db.exists('public.audit_marker')).toBe(false);
    expect(await db.exists('public.later_marker')).toBe(false);
  });

  it('an applied file renamed under its version fails the run', async () => {
    const db = await scratch();
    const original = db.files.at(-1)!;
    const renamed = `${versionOf(original)}_renamed_after_applying.sql`;
    await rename(path.join(db.directory, original), path.join(db.directory, renamed));
    await addLaterMigration(db);

    await expect(db.migrate()).rejects.toThrow(new RegExp(`${escape(original)}.*${escape(renamed)}`));
    expect(await db.exists('public.later_marker')).toBe(false);
  });

  it('a second file reusing an applied version fails the run instead of being skipped', async () => {
    const db = await scratch();
    const version = versionOf(db.files.at(-1)!);
    const reused = `${version}_add_profiles_nickname.sql`;
    await writeFile(path.join(db.directory, reused), 'alter table public.profiles add column nickname text;\n');

    await expect(db.migrate()).rejects.toThrow(new RegExp(`share version ${version}.*${escape(reused)}|${escape(reused)}.*share version ${version}`));
    const [column] = await db.sql`select 1 from information_schema.columns where table_name = 'profiles' and column_name = 'nickname'`;
    expect(column).toBeUndefined();
  });

  it('a new file with a version below the newest applied one fails the run (out of order)', async () => {
    const db = await scratch();
    const newest = db.files.at(-1)!;
    // The free version nearest below the newest (migrations of one change may take consecutive versions).
    const taken = new Set(db.files.map(versionOf));
    let below = BigInt(versionOf(newest)) - 1n;
    while (taken.has(String(below))) below -= 1n;
    const late = `${below}_create_late_marker.sql`;
    await writeFile(path.join(db.directory, late), 'create table public.late_marker (x int);\n');

    await expect(db.migrate()).rejects.toThrow(new RegExp(`^Migration ${escape(late)} .*${escape(newest)}`));
    expect(await db.exists('public.late_marker')).toBe(false);
    expect(await db.recorded()).not.toContain(versionOf(late));
  });

  it('a recorded migration whose file is gone fails the run', async () => {
    const db = await scratch();
    const removed = db.files.at(-1)!;
    await rm(path.join(db.directory, removed));
    await addLaterMigration(db);

    await expect(db.migrate()).rejects.toThrow(new RegExp(`^Migration ${escape(removed)} is recorded as applied but has no file`));
    expect(await db.exists('public.later_marker')).toBe(false);
  });

  it('statements recorded split, as `supabase db push` stores them, are compared with the file split the same way', async () => {
    const db = await scratch();
    const file = '29991231000000_create_split_marker.sql';
    const body = "-- a marker\ncreate table public.split_marker (x int);\n\ncomment on table public.split_marker is 'a; b';\n";
    await writeFile(path.join(db.directory, file), body);
    await db.migrate();
    // What the CLI records for that body (pkg/parser SplitAndTrim: split at top-level ';', trailing ';' and space trimmed).
    const split = ['-- a marker\ncreate table public.split_marker (x int)', "comment on table public.split_marker is 'a; b'"];
    await db.sql`update supabase_migrations.schema_migrations set statements = ${split} where version = ${versionOf(file)}`;
    expect(await db.migrate()).toEqual([]);

    await writeFile(path.join(db.directory, file), body.replace("'a; b'", "'a; c'"));
    await expect(db.migrate()).rejects.toThrow(new RegExp(`^Migration ${escape(file)} was changed after it was applied`));
  });
});

describe('a database migrated by a later release (a rollback)', () => {
  /** Two migrations applied and then gone from the files, as when an earlier release's files meet the database a later one migrated. */
  async function laterReleaseApplied(db: Scratch): Promise<string[]> {
    const later = ['29991231000000_create_later_marker.sql', '29991231000001_create_latest_marker.sql'];
    await writeFile(path.join(db.directory, later[0]), 'create table public.later_marker (x int);\n');
    await writeFile(path.join(db.directory, later[1]), 'create table public.latest_marker (x int);\n');
    expect(await db.migrate()).toEqual(later);
    for (const file of later) await rm(path.join(db.directory, file));
    return later;
  }
  const migrateTelling = async (db: Scratch) => {
    const told: (readonly string[])[] = [];
    const applied = await applyMigrations(db.url, { directory: db.directory, onAhead: (newer) => told.push(newer) });
    return { applied, told };
  };

  it('when the only difference is migrations newer than every file, applies nothing, tells which, and succeeds', async () => {
    const db = await scratch();
    const later = await laterReleaseApplied(db);
    const before = await db.recorded();
    expect(await migrateTelling(db)).toEqual({ applied: [], told: [later] });
    expect(await db.recorded()).toEqual(before);
    // A database with nothing newer tells nothing.
    const fresh = await scratch();
    expect(await migrateTelling(fresh)).toEqual({ applied: [], told: [] });
  });

  it('a file of this release never applied under the newer ones is still refused, and nothing applied', async () => {
    const db = await scratch();
    await laterReleaseApplied(db);
    const unapplied = '29990101000000_create_unapplied_marker.sql';
    await writeFile(path.join(db.directory, unapplied), 'create table public.unapplied_marker (x int);\n');
    await expect(db.migrate()).rejects.toThrow(new RegExp(`^Migration 29991231000000_create_later_marker.sql is recorded as applied but has no file.*${escape(unapplied)}`));
    expect(await db.exists('public.unapplied_marker')).toBe(false);
  });

  it('an applied file gone from among the others is still refused, newer ones beside it or not', async () => {
    const db = await scratch();
    await laterReleaseApplied(db);
    const removed = db.files.at(-2)!;
    await rm(path.join(db.directory, removed));
    await expect(migrateTelling(db)).rejects.toThrow(new RegExp(`^Migration ${escape(removed)} is recorded as applied but has no file`));
  });
});

describe('a migration amended after it landed (AMENDED_MIGRATIONS)', () => {
  const amended = '20261127100000_count_feedback_by_status_and_website.sql';
  /** The body it landed with: its LOCK TABLE at the top level, not in a `do` block. */
  const landedBody = (body: string) =>
    body.replace(/-- Inside a `do` block:[\s\S]*?\ndo \$\$\nbegin\n  (lock table [^\n]+)\nend;\n\$\$;\n/, '$1\n');

  it('a database that recorded the body it landed with, whole or split, migrates on; any other edit is still refused', async () => {
    const db = await scratch();
    const landed = landedBody(await readFile(path.join(db.directory, amended), 'utf8'));
    expect(landed).toMatch(/\nlock table public\.feedback in share row exclusive mode;\n/);
    await addLaterMigration(db);
    const record = (statements: string[]) => db.sql`update supabase_migrations.schema_migrations set statements = ${statements} where version = ${versionOf(amended)}`;

    // Whole, as `npm run migrate` records a file.
    await record([landed]);
    expect(await db.migrate()).toEqual(['29991231000000_create_later_marker.sql']);
    // Split at its `;`, as `supabase db push` records one (the comparison does not depend on where).
    await record(landed.split(';').map((piece) => piece.trim()).filter((piece) => piece !== ''));
    expect(await db.migrate()).toEqual([]);

    await record([`${landed}\ncreate table public.audit_marker (x int);\n`]);
    await expect(db.migrate()).rejects.toThrow(new RegExp(`^Migration ${escape(amended)} was changed after it was applied`));
  });
});

describe('a database whose auth server already has accounts', () => {
  it('each account gets the profile a new one gets; a soft-deleted one gets none', async () => {
    const db = await scratch({ migrated: false });
    // The auth server's later tables have deleted_at; the platform bootstrap's first generation does not.
    await db.sql`alter table auth.users add column deleted_at timestamptz`;
    const [named, plain, deleted] = [crypto.randomUUID(), crypto.randomUUID(), crypto.randomUUID()];
    const signedIn = new Date('2026-10-01T08:00:00Z');
    await db.sql`
      insert into auth.users (id, email, raw_user_meta_data, created_at, last_sign_in_at, deleted_at) values
        (${named}, 'ada@example.test', '{"name": "  Ada Lovelace  "}', '2026-01-02T03:04:05Z', ${signedIn}, null),
        (${plain}, 'grace@example.test', '{}', '2026-02-03T04:05:06Z', null, null),
        (${deleted}, 'gone@example.test', '{"name": "Gone"}', '2026-03-04T05:06:07Z', null, now())`;
    await db.migrate();
    const profiles = await db.sql`select id, email, name, created_at, last_login from public.profiles order by email`;
    expect(profiles).toEqual([
      { id: named, email: 'ada@example.test', name: 'Ada Lovelace', created_at: new Date('2026-01-02T03:04:05Z'), last_login: signedIn },
      { id: plain, email: 'grace@example.test', name: 'grace', created_at: new Date('2026-02-03T04:05:06Z'), last_login: null },
    ]);
  });
});

describe('profile names stored before the rule', () => {
  it('are mended (trimmed, cut to 100 characters, else user) so that later updates of their rows still pass the check', async () => {
    const db = await scratch({ migrated: false });
    // The rule and the migrations after it are held back: the rest is a database from before it.
    const later = db.files.slice(db.files.findIndex((file) => file.includes('_profile_names_obey_the_rule')));
    for (const file of later) await rename(path.join(db.directory, file), path.join(db.directory, `${file}.later`));
    await db.migrate();
    const names = [' Padded ', 'x'.repeat(150), '\t \n', 'Fine Name'];
    const ids = names.map(() => crypto.randomUUID());
    for (const [index, id] of ids.entries()) {
      await db.sql`insert into auth.users (id, email, raw_user_meta_data) values (${id}, ${`n${index}@example.test`}, '{}')`;
      await db.sql`update public.profiles set name = ${names[index]} where id = ${id}`;
    }
    for (const file of later) await rename(path.join(db.directory, `${file}.later`), path.join(db.directory, file));
    await db.migrate();
    const rows = await db.sql`select id, name from public.profiles`;
    const nameOf = (id: string) => rows.find((row) => row.id === id)?.name;
    expect(ids.map(nameOf)).toEqual(['Padded', 'x'.repeat(100), 'user', 'Fine Name']);
    // A sign-in updates each row; none is refused now.
    expect((await db.sql`update public.profiles set last_login = now()`).count).toBe(4);
  });
});

describe('rows stored before the 2026-11-29 bounds', () => {
  it('gives a profile whose e-mail was typed in by hand its account\'s address again, so notifications stop going there', async () => {
    const db = await scratch({ migrated: false });
    // The profiles' rules and the migrations after them held back: the typed address goes in as it did before.
    const later = db.files.slice(db.files.findIndex((file) => file.includes('_keep_profiles_with_their_accounts')));
    for (const file of later) await rename(path.join(db.directory, file), path.join(db.directory, `${file}.later`));
    await db.migrate();
    const [typed, kept] = [crypto.randomUUID(), crypto.randomUUID()];
    await db.sql`insert into auth.users (id, email, raw_user_meta_data) values (${typed}, 'owner@example.test', '{}'), (${kept}, 'kept@example.test', '{}')`;
    await db.sql`update public.profiles set email = 'typed-by-hand@example.net' where id = ${typed}`;
    for (const file of later) await rename(path.join(db.directory, `${file}.later`), path.join(db.directory, file));
    await db.migrate();
    const profiles = await db.sql`select id, email from public.profiles where id in (${typed}, ${kept}) order by email`;
    expect(profiles).toEqual([
      { id: kept, email: 'kept@example.test' },
      { id: typed, email: 'owner@example.test' },
    ]);
  });

  it('stop at a timestamp typed by hand outside 1970–9999, naming it, before any bound is added; mended, they apply', async () => {
    const db = await scratch({ migrated: false });
    const later = db.files.slice(db.files.findIndex((file) => file.includes('_bound_shown_timestamps')));
    for (const file of later) await rename(path.join(db.directory, file), path.join(db.directory, `${file}.later`));
    await db.migrate();
    const account = crypto.randomUUID();
    await db.sql`insert into auth.users (id, email, raw_user_meta_data) values (${account}, 'typed-time@example.test', '{}')`;
    await db.sql`update public.profiles set last_login = 'infinity' where id = ${account}`;
    for (const file of later) await rename(path.join(db.directory, `${file}.later`), path.join(db.directory, file));
    await expect(db.migrate()).rejects.toThrow(/rows hold timestamps outside 1970 to 9999 in profiles\.last_login/);
    // Nothing of it applied: the account's sign-ins still write its profile.
    expect(await db.sql`select conname from pg_constraint where conname like '%\_in\_range'`).toEqual([]);
    await db.sql`update public.profiles set last_login = now() where id = ${account}`;
    await db.migrate();
    expect((await db.sql`select conname from pg_constraint where conname like '%\_in\_range' and convalidated`).length).toBe(10);
  });

  it('are mended: a website over the bounds, and a profile that kept an address its account no longer has', async () => {
    const db = await scratch({ migrated: false });
    const later = db.files.slice(db.files.findIndex((file) => file.includes('_bound_website_columns')));
    expect(later.some((file) => file.includes('_profile_email_follows_removal'))).toBe(true);
    for (const file of later) await rename(path.join(db.directory, file), path.join(db.directory, `${file}.later`));
    await db.migrate();

    const [website] = await db.sql`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix, settings, metadata)
      values ('Over', 'over.example.test', decode('00', 'hex'), ${'p'.repeat(40)}, jsonb_build_object('x', repeat('A', 2000000)), '{"kept": true}')
      returning id`;
    const account = crypto.randomUUID();
    await db.sql`insert into auth.users (id, email, raw_user_meta_data) values (${account}, 'left@example.test', '{}')`;
    await db.sql`update auth.users set email = null where id = ${account}`;
    expect((await db.sql`select email from public.profiles where id = ${account}`)[0].email).toBe('left@example.test');

    for (const file of later) await rename(path.join(db.directory, `${file}.later`), path.join(db.directory, file));
    await db.migrate();
    const [mended] = await db.sql`select settings, metadata, api_key_prefix, octet_length(api_key_hash) as hash_bytes from public.websites where id = ${website.id}`;
    expect(mended).toEqual({ settings: {}, metadata: { kept: true }, api_key_prefix: 'p'.repeat(12), hash_bytes: 32 });
    // The bounds hold from here on, and the mended row takes an update as the API's.
    await expect(db.sql`update public.websites set api_key_prefix = ${'p'.repeat(33)} where id = ${website.id}`).rejects.toMatchObject({ code: '23514' });
    expect((await db.sql`update public.websites set name = 'Renamed' where id = ${website.id}`).count).toBe(1);
    expect((await db.sql`select email from public.profiles where id = ${account}`)[0].email).toBe('');
  });
});

describe('runs at the same time', () => {
  it('two runs started together on a fresh database both succeed and apply every migration once', async () => {
    const db = await scratch({ migrated: false });
    const runs = await Promise.allSettled([db.migrate(), db.migrate()]);
    expect(runs.map((run) => (run.status === 'rejected' ? String(run.reason) : run.status))).toEqual(['fulfilled', 'fulfilled']);
    const applied = runs.flatMap((run) => (run.status === 'fulfilled' ? run.value : []));
    expect(applied.sort()).toEqual(db.files);
    expect(await db.recorded()).toEqual(db.files.map(versionOf));
    // The repository's own migrations pass the check on a database migrated from them.
    expect(await db.migrate()).toEqual([]);
  });
});
