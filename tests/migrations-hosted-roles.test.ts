import { randomBytes, randomUUID } from 'node:crypto';
import { cp, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { applyMigrations, MigrationError, MIGRATIONS_DIR } from '../scripts/stack/database.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { createHostedDatabase, type HostedDatabase } from './support/hosted-supabase.ts';

// supabase/migrations must apply on a hosted Supabase project (README, Using
// hosted Supabase), where the owner that runs `npm run migrate` or `supabase
// db push` is `postgres`, no superuser, and since 2025 no member of
// supabase_auth_admin and without CREATE on schema auth. The local stack runs
// them as a superuser, which would hide any statement needing more. Here they
// run as an owner with only the hosted rights (tests/support/hosted-supabase.ts),
// then the README's login role is made by that owner, and the auth server's
// writes and the session functions work through what the owner built.

let hosted: HostedDatabase;
let admin: postgres.Sql;
/** What `npm run migrate`'s runner applied as the hosted owner, or the migration it stopped at. */
let outcome: string[] | MigrationError;
const loginRole = `portfolio_api_${randomBytes(4).toString('hex')}`;

beforeAll(async () => {
  hosted = await createHostedDatabase('hosted_roles');
  admin = postgres(hosted.url, { max: 1, onnotice: () => {} });
  // Kept, not thrown, so that a refused migration fails the test below by
  // name instead of leaving every test skipped.
  outcome = await applyMigrations(hosted.ownerUrl).catch((error: unknown) => {
    if (error instanceof MigrationError) return error;
    throw error;
  });
});

afterAll(async () => {
  await admin?.end({ timeout: 5 });
  if (hosted) {
    const server = postgres(hosted.url, { max: 1, onnotice: () => {} });
    await server.unsafe(`drop role if exists ${loginRole}`).finally(() => server.end({ timeout: 5 }));
    await hosted.drop();
  }
});

/** Runs `work` connected as `role` (trust authentication, as the local server has), then disconnects. */
async function as<T>(role: string, work: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(asLoginRole(hosted.url, role), { max: 1, onnotice: () => {} });
  try {
    return await work(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

describe('supabase/migrations as a hosted project owner (no superuser, the 2025 auth restrictions)', () => {
  it('the owner has only the hosted rights: no superuser, no supabase_auth_admin, no CREATE on auth, no writes to auth.schema_migrations', async () => {
    const [owner] = await admin`
      select r.rolsuper as superuser,
             pg_has_role(r.oid, 'supabase_auth_admin', 'member') as auth_admin,
             has_schema_privilege(r.oid, 'auth', 'create') as creates_in_auth,
             has_table_privilege(r.oid, 'auth.schema_migrations', 'insert, update, delete') as writes_auth_history,
             has_table_privilege(r.oid, 'auth.users', 'trigger, references, select') as uses_auth_users
        from pg_roles r where r.rolname = ${hosted.owner}`;
    expect(owner).toEqual({ superuser: false, auth_admin: false, creates_in_auth: false, writes_auth_history: false, uses_auth_users: true });
  });

  it('every migration applies, in order, each recorded', async () => {
    const files = (await readdir(MIGRATIONS_DIR)).filter((file) => file.endsWith('.sql')).sort();
    expect(outcome instanceof MigrationError ? outcome.message : 'every migration applied').toBe('every migration applied');
    expect(outcome).toEqual(files);
    const [{ recorded }] = await admin`select count(*)::int as recorded from supabase_migrations.schema_migrations`;
    expect(recorded).toBe(files.length);
    // What the owner built is the owner's, as hosted (where nothing is the superuser's).
    const [{ owned }] = await admin`select count(*)::int as owned from pg_class where relnamespace = 'public'::regnamespace and relowner <> ${hosted.owner}::regrole`;
    expect(owned).toBe(0);
  });

  it("the README's login role is made by the owner, and switches to the API roles", async () => {
    await as(hosted.owner, async (sql) => {
      await sql.unsafe(`create role ${loginRole} login noinherit password '${randomBytes(16).toString('hex')}'`);
      await sql.unsafe(`grant anon, authenticated, service_role to ${loginRole}`);
    });
    const roles = await as(loginRole, (sql) =>
      sql.begin(async (tx) => {
        const seen: string[] = [];
        for (const role of ['anon', 'authenticated', 'service_role']) {
          await tx.unsafe(`set local role ${role}`);
          const [{ current }] = await tx`select current_user as current`;
          seen.push(current);
        }
        return seen;
      }),
    );
    expect(roles).toEqual(['anon', 'authenticated', 'service_role']);
  });

  it("the auth server's writes to auth.users reach the profiles through the owner's triggers", async () => {
    const id = randomUUID();
    await as('supabase_auth_admin', async (sql) => {
      await sql`insert into auth.users (instance_id, id, aud, role, email, raw_user_meta_data, raw_app_meta_data, created_at, updated_at)
                values ('00000000-0000-0000-0000-000000000000', ${id}, 'authenticated', 'authenticated', ${`${id}@example.com`},
                        ${sql.json({ name: 'Hosted' })}, ${sql.json({})}, now(), now())`;
      await sql`update auth.users set raw_user_meta_data = ${sql.json({ name: 'Hosted Renamed' })} where id = ${id}`;
    });
    const [profile] = await admin`select name, email from public.profiles where id = ${id}`;
    expect(profile).toEqual({ name: 'Hosted Renamed', email: `${id}@example.com` });
  });

  it.runIf(inject('stack').auth)("the session functions read and end the auth server's sessions and write its audit log", async () => {
    expect(hosted.authMigrated).toBe(true);
    const userId = randomUUID();
    const sessionId = randomUUID();
    await as('supabase_auth_admin', async (sql) => {
      await sql`insert into auth.users (instance_id, id, aud, role, email, created_at, updated_at)
                values ('00000000-0000-0000-0000-000000000000', ${userId}, 'authenticated', 'authenticated', ${`${userId}@example.com`}, now(), now())`;
      await sql`insert into auth.sessions (id, user_id, created_at, updated_at) values (${sessionId}, ${userId}, now(), now())`;
    });
    const outcome = await as('authenticator', (sql) =>
      sql.begin(async (tx) => {
        await tx`set local role service_role`;
        const [{ before }] = await tx`select public.session_is_open(${userId}, ${sessionId}) as before`;
        const [{ ended }] = await tx`select public.end_all_sessions(${userId}) as ended`;
        const [{ after }] = await tx`select public.session_is_open(${userId}, ${sessionId}) as after`;
        return { before, ended, after };
      }),
    );
    expect(outcome).toEqual({ before: true, ended: 1, after: false });
    const [{ entries }] = await admin`select count(*)::int as entries from auth.audit_log_entries where payload ->> 'actor_id' = ${userId}`;
    expect(entries).toBe(1);
  });
});

describe('the check can fail: a migration needing more than the hosted owner has is refused', () => {
  // Each runs after the real migrations, as the next file of a copy of them,
  // and is rolled back with its failure, so one leaves nothing for the next.
  it.each([
    ['makes a function in auth (CREATE on auth, revoked in 2025)', 'create function auth.hosted_probe() returns int language sql as $$ select 1 $$;', /permission denied for schema auth/],
    ['acts as the auth server (membership of supabase_auth_admin, revoked in 2025)', 'set local role supabase_auth_admin;', /permission denied to set role "supabase_auth_admin"/],
    ["changes the auth server's table (only its owner may)", 'alter table auth.users add column hosted_probe int;', /must be owner of table users/],
    // It still reads it, as it reads every table: pg_read_all_data.
    ["writes the auth server's migration history (revoked in 2025)", "insert into auth.schema_migrations (version) values ('29991231235959');", /permission denied for table schema_migrations/],
  ])('a migration that %s fails, naming itself, with 42501', async (_what, body, reason) => {
    const directory = await mkdtemp(path.join(tmpdir(), 'hosted-migrations-'));
    try {
      await cp(MIGRATIONS_DIR, directory, { recursive: true });
      await writeFile(path.join(directory, '29991231235959_needs_more_than_hosted.sql'), `${body}\n`);
      const failure = await applyMigrations(hosted.ownerUrl, { directory }).catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(MigrationError);
      expect((failure as MigrationError).message).toMatch(/^29991231235959_needs_more_than_hosted\.sql failed \(rolled back\)/);
      expect((failure as MigrationError).message).toMatch(reason);
      expect(((failure as MigrationError).cause as { code?: string }).code).toBe('42501');
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });
});
