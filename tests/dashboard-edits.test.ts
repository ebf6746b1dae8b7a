import type postgres from 'postgres';
import { describe, expect, it } from 'vitest';
import { createAuthUser, grantRole } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// Rows edited by hand in the Supabase dashboard: its Table Editor and SQL
// Editor act as the owner (`postgres`), past row-level security and the API.
// Here as this run's superuser, in a database of this file's own (the
// last-admin rule is about the whole table). docs/admin.md, "Rows edited in
// the Supabase dashboard"; supabase/migrations/20261129160900 to
// 20261129160905 (refuse_truncating_user_roles, keep_role_changes_append_only,
// keep_profiles_with_their_accounts, bound_shown_timestamps,
// validate_shown_timestamp_bounds, match_feedback_resolution_to_status).

const database = usePrivateDatabase('edits');
const sql = () => database.sql;

/** The auth server's own writes to auth.users. */
const asAuthServer = <T>(work: (tx: postgres.TransactionSql) => Promise<T>) =>
  sql().begin(async (tx) => {
    await tx`set local role supabase_auth_admin`;
    return work(tx);
  }) as Promise<T>;

/** Runs `work` with triggers off (a restore, replication, or a profile lost before the triggers that now keep it). */
const withTriggersOff = <T>(work: (tx: postgres.TransactionSql) => Promise<T>) =>
  sql().begin(async (tx) => {
    await tx`set local session_replication_role = replica`;
    return work(tx);
  }) as Promise<T>;

const rolesOf = async (id: string) => (await sql()`select role::text from public.user_roles where user_id = ${id} order by role`).map((row) => row.role);
const recordOf = (id: string) => sql()`select role::text, action, changed_by from public.role_changes where user_id = ${id} order by id`;
const profileOf = async (id: string) => (await sql()`select email, name, created_at, last_login from public.profiles where id = ${id}`)[0];

describe('roles and their record, edited by hand', () => {
  it('TRUNCATE of user_roles (the Table Editor deleting every row) is refused with what to do instead; the admin and the record stay', async () => {
    const admin = await createAuthUser(sql(), { name: 'Only Admin' });
    await grantRole(sql(), admin.id, 'admin');

    // Before: every role gone, the last admin's too, and role_changes recorded nothing.
    await expect(sql()`truncate public.user_roles`).rejects.toMatchObject({
      code: '55000',
      message: 'public.user_roles cannot be truncated: TRUNCATE skips the rules each row is held to',
      hint: expect.stringMatching(/^Delete the rows instead/),
    });
    expect(await rolesOf(admin.id)).toEqual(['admin']);
    expect(await recordOf(admin.id)).toEqual([{ role: 'admin', action: 'granted', changed_by: 'database:postgres' }]);
  });

  it('role_changes is append-only: update, delete and truncate refused; grants, revocations and an account deleted are still recorded', async () => {
    const user = await createAuthUser(sql(), { name: 'Recorded User' });
    await grantRole(sql(), user.id, 'viewer');
    const granted = [{ role: 'viewer', action: 'granted', changed_by: 'database:postgres' }];
    expect(await recordOf(user.id)).toEqual(granted);

    for (const statement of [
      sql()`update public.role_changes set changed_by = 'someone-else' where user_id = ${user.id}`,
      sql()`delete from public.role_changes where user_id = ${user.id}`,
      sql()`truncate public.role_changes`,
    ]) {
      await expect(statement).rejects.toMatchObject({ code: '55000', message: 'role_changes is append-only: it records who granted and revoked roles' });
    }
    expect(await recordOf(user.id)).toEqual(granted);

    await sql()`delete from public.user_roles where user_id = ${user.id} and role = 'viewer'`;
    await grantRole(sql(), user.id, 'editor');
    // The account deleted: the cascade takes its roles, and the record of that stays.
    await asAuthServer((tx) => tx`delete from auth.users where id = ${user.id}`);
    expect(await rolesOf(user.id)).toEqual([]);
    expect(await recordOf(user.id)).toEqual([
      ...granted,
      { role: 'viewer', action: 'revoked', changed_by: 'database:postgres' },
      { role: 'editor', action: 'granted', changed_by: 'database:postgres' },
      { role: 'editor', action: 'revoked', changed_by: 'database:postgres' },
    ]);
  });
});

describe('profiles edited by hand', () => {
  it('a profile lost (before these rules, or with triggers off) comes back at the next sign-in, as a new account gets it; an admin is then listed again', async () => {
    const user = await createAuthUser(sql(), { metadata: { name: '  Lost Admin  ' } });
    await grantRole(sql(), user.id, 'admin');
    const made = await profileOf(user.id);
    await withTriggersOff((tx) => tx`delete from public.profiles where id = ${user.id}`);
    expect(await profileOf(user.id)).toBeUndefined();

    // Before: a sign-in only updated a profile that exists, and /me stayed 404 for good.
    await asAuthServer((tx) => tx`update auth.users set last_sign_in_at = now() where id = ${user.id}`);
    expect(await profileOf(user.id)).toEqual({ email: user.email, name: 'Lost Admin', created_at: made.created_at, last_login: expect.any(Date) });
    // The admins' list joins profiles: the admin is in it, with the role.
    const [listed] = await sql()`select p.id from public.profiles p join public.user_roles r on r.user_id = p.id where r.role = 'admin' and p.id = ${user.id}`;
    expect(listed?.id).toBe(user.id);
  });

  it("a profile's e-mail is its account's: one typed in is refused, saying where to change it; the account's change still reaches the profile", async () => {
    const user = await createAuthUser(sql(), { name: 'Mail Owner' });
    await grantRole(sql(), user.id, 'admin');

    // Before: admin_notification_emails() sent this admin's notifications to the typed address.
    await expect(sql()`update public.profiles set email = 'typed@example.test' where id = ${user.id}`).rejects.toMatchObject({
      code: '55000',
      message: "a profile's e-mail follows its account (auth.users): it cannot be set here",
      hint: expect.stringMatching(/in Authentication/),
    });
    expect((await profileOf(user.id)).email).toBe(user.email);
    expect(await sql()`select public.admin_notification_emails() as email`).toContainEqual({ email: user.email });
    // A profile put back by hand carries the account's address, no other.
    await withTriggersOff((tx) => tx`delete from public.profiles where id = ${user.id}`);
    await expect(sql()`insert into public.profiles (id, email, name) values (${user.id}, 'typed@example.test', 'Mail Owner')`).rejects.toMatchObject({ code: '55000' });
    await sql()`insert into public.profiles (id, email, name) values (${user.id}, ${user.email}, 'Mail Owner')`;

    // Other columns stay editable; the account's own change of address is followed.
    await sql()`update public.profiles set name = 'Renamed Owner' where id = ${user.id}`;
    await asAuthServer((tx) => tx`update auth.users set email = 'moved-owner@example.test' where id = ${user.id}`);
    expect(await profileOf(user.id)).toMatchObject({ email: 'moved-owner@example.test', name: 'Renamed Owner' });
  });

  it('a profile is not deleted (nor truncated) while its account exists; deleting or soft-deleting the account still removes it', async () => {
    const user = await createAuthUser(sql(), { name: 'Kept Profile' });
    await grantRole(sql(), user.id, 'viewer');

    await expect(sql()`delete from public.profiles where id = ${user.id}`).rejects.toMatchObject({
      code: '55000',
      message: 'a profile goes with its account: this account still exists',
      hint: expect.stringMatching(/^Delete the user in Authentication/),
    });
    await expect(sql()`truncate public.profiles`).rejects.toMatchObject({ code: '55000', hint: expect.stringMatching(/^Delete the users in Authentication/) });
    expect((await profileOf(user.id)).name).toBe('Kept Profile');

    await asAuthServer((tx) => tx`delete from auth.users where id = ${user.id}`);
    expect(await profileOf(user.id)).toBeUndefined();
    expect(await rolesOf(user.id)).toEqual([]);

    // The auth server's soft delete (a column of its later tables): the trigger removes the profile.
    await sql()`alter table auth.users add column if not exists deleted_at timestamptz`;
    const soft = await createAuthUser(sql(), { name: 'Soft Deleted' });
    await asAuthServer((tx) => tx`update auth.users set email = 'aGFzaGVk', deleted_at = now() where id = ${soft.id}`);
    expect(await profileOf(soft.id)).toBeUndefined();
  });
});

describe('timestamps typed by hand', () => {
  it('only instants from 1970 to 9999 are stored in the columns the API shows: infinity, BC and five-digit years are refused', async () => {
    const user = await createAuthUser(sql(), { name: 'Timed User' });
    const [feedback] = await sql()`
      insert into public.feedback (name, email, comment, rating, status, resolved_at)
      values ('Tim', 'tim@example.test', 'A comment of some length', 3, 'resolved', now()) returning id`;
    const [website] = await sql()`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('Timed', 'timed.example.test', sha256('timed'), 'wsk_timed000') returning id`;
    const [log] = await sql()`insert into public.app_logs (level, message, source) values ('warn', 'timed', 'server') returning id`;
    const rows = [
      ['profiles', user.id, ['created_at', 'last_login', 'updated_at']],
      ['feedback', feedback.id, ['created_at', 'updated_at', 'resolved_at']],
      ['websites', website.id, ['created_at', 'updated_at', 'deletion_started_at']],
      ['app_logs', log.id, ['created_at']],
    ] as const;
    // Triggers off: updated_at is the touch trigger's to write on an update (a typed one goes in with an insert).
    const set = (table: string, id: string, column: string, value: string) =>
      withTriggersOff((tx) => tx`update ${tx(`public.${table}`)} set ${tx(column)} = ${value}::text::timestamptz where id = ${id} returning ${tx(column)} as stored`);

    for (const [table, id, columns] of rows) {
      for (const column of columns) {
        for (const refused of ['infinity', '-infinity', '0001-01-01 00:00:00+00 BC', '1969-12-31 23:59:59.999+00', '10000-01-01 00:00:00+00']) {
          await expect(set(table, id, column, refused), `${table}.${column} = ${refused}`).rejects.toMatchObject({
            code: '23514',
            constraint_name: `${table}_${column}_in_range`,
          });
        }
        // The bounds themselves, as the API writes them (Date#toISOString, a four-digit year).
        for (const stored of ['1970-01-01T00:00:00.000Z', '9999-12-31T23:59:59.999Z']) {
          const [row] = await set(table, id, column, stored);
          expect(row.stored.toISOString(), `${table}.${column}`).toBe(stored);
        }
      }
    }
  });

  it('every bound is validated: added without a scan (20261129160903), then checked against the rows already there (20261129160904)', async () => {
    // A check left NOT VALID still refuses new rows, so the test above passes without its validation.
    const checks = await sql()`
      select conname, convalidated from pg_constraint
       where connamespace = 'public'::regnamespace and contype = 'c' and conname ~ '_in_range$'
       order by conname`;
    expect(checks).toEqual(
      [
        'app_logs_created_at_in_range',
        'feedback_created_at_in_range',
        'feedback_resolved_at_in_range',
        'feedback_updated_at_in_range',
        'profiles_created_at_in_range',
        'profiles_last_login_in_range',
        'profiles_updated_at_in_range',
        'websites_created_at_in_range',
        'websites_deletion_started_at_in_range',
        'websites_updated_at_in_range',
      ].map((conname) => ({ conname, convalidated: true })),
    );
  });
});

describe('feedback triaged by hand', () => {
  it('set to resolved, it gets resolved_at now; archived keeps it; resolved again, a new one; back to pending clears both; a resolved_at typed in is kept', async () => {
    const [{ id }] = await sql()`
      insert into public.feedback (name, email, comment, rating) values ('Ria', 'ria@example.test', 'Resolved in the Table Editor', 4) returning id`;
    const stateOf = async () => (await sql()`select status::text, resolved_at, resolved_by from public.feedback where id = ${id}`)[0];

    // Before: refused by feedback_resolution_matches_status unless resolved_at was typed too.
    const before = new Date();
    await sql()`update public.feedback set status = 'resolved' where id = ${id}`;
    const resolved = await stateOf();
    expect(resolved).toMatchObject({ status: 'resolved', resolved_by: null });
    expect(resolved.resolved_at.getTime()).toBeGreaterThanOrEqual(before.getTime() - 1_000);

    await sql()`update public.feedback set resolved_by = 'Ops Team' where id = ${id}`;
    await sql()`update public.feedback set status = 'archived' where id = ${id}`;
    expect(await stateOf()).toEqual({ status: 'archived', resolved_at: resolved.resolved_at, resolved_by: 'Ops Team' });
    // Resolved again from archived: a new time, as the API's update sets.
    await sql()`update public.feedback set status = 'resolved' where id = ${id}`;
    expect((await stateOf()).resolved_at.getTime()).toBeGreaterThan(resolved.resolved_at.getTime());

    // Back to pending, as the API's update does; a resolution typed with it is still refused.
    await expect(sql()`update public.feedback set status = 'pending', resolved_by = 'Someone' where id = ${id}`).rejects.toMatchObject({
      code: '23514',
      constraint_name: 'feedback_resolution_matches_status',
    });
    await sql()`update public.feedback set status = 'pending' where id = ${id}`;
    expect(await stateOf()).toEqual({ status: 'pending', resolved_at: null, resolved_by: null });

    const typed = new Date('2026-01-02T03:04:05.000Z');
    await sql()`update public.feedback set status = 'resolved', resolved_at = ${typed} where id = ${id}`;
    expect(await stateOf()).toEqual({ status: 'resolved', resolved_at: typed, resolved_by: null });
  });
});
