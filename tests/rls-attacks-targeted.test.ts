import { randomBytes, randomUUID } from 'node:crypto';
import type postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { asUser, createAuthUser, grantRole, type TestUser, testSql } from './support/db.ts';
import { createWebsite } from './support/feedback-fixtures.ts';

// Issue 7, RLS attacks by name: direct SQL under a signed-in user's claims
// (tests/support/db.ts `asUser`, rolled back) tries what a malicious user
// would, and the superuser then checks nothing changed. Each attack has a
// control that the rightful role gets through, so a refusal means something.
// tests/rls-attacks.test.ts covers every table generically.

const sql = testSql();
afterAll(() => sql.end());

type Role = 'admin' | 'editor' | 'viewer';
const NON_ADMINS: (Role | undefined)[] = [undefined, 'viewer', 'editor'];
const label = (role: Role | undefined) => role ?? 'no role';

async function userWith(role?: Role): Promise<TestUser> {
  const user = await createAuthUser(sql, { name: `User ${label(role)}` });
  if (role) await grantRole(sql, user.id, role);
  return user;
}

async function feedbackRow(): Promise<string> {
  const id = randomUUID();
  await sql`insert into public.feedback (id, name, email, comment, rating) values (${id}, 'Someone Else', 'else@example.test', 'Private feedback for admins', 3)`;
  return id;
}

const denied = (attempt: Promise<unknown>) => expect(attempt).rejects.toMatchObject({ code: '42501' });
const as = <T>(user: TestUser | null, work: (tx: postgres.TransactionSql) => Promise<T>) => asUser(sql, user?.id ?? null, work);

describe('targeted attacks under a user\'s claims', () => {
  it('a non-admin reads no feedback', async () => {
    const id = await feedbackRow();
    for (const role of NON_ADMINS) {
      const user = await userWith(role);
      expect(await as(user, (tx) => tx`select id from public.feedback where id = ${id}`), label(role)).toEqual([]);
      expect(await as(user, (tx) => tx`select count(*)::int as n from public.feedback`), label(role)).toEqual([{ n: 0 }]);
    }
    const admin = await userWith('admin');
    expect(await as(admin, (tx) => tx`select id from public.feedback where id = ${id}`)).toEqual([{ id }]);
  });

  it('no one grants themself admin, by insert, upsert or update', async () => {
    for (const role of NON_ADMINS) {
      const user = await userWith(role);
      await denied(as(user, (tx) => tx`insert into public.user_roles (user_id, role) values (${user.id}, 'admin')`));
      await denied(as(user, (tx) => tx`insert into public.user_roles (user_id, role) values (${user.id}, 'admin') on conflict do nothing`));
      await denied(as(user, (tx) => tx`update public.user_roles set role = 'admin' where user_id = ${user.id}`));
      const roles = await sql`select role::text from public.user_roles where user_id = ${user.id}`;
      expect(roles.map((r) => r.role), label(role)).toEqual(role ? [role] : []);
      expect(await sql`select 1 from public.role_changes where user_id = ${user.id} and role = 'admin'`).toHaveLength(0);
    }
    const admin = await userWith('admin');
    const other = await userWith();
    const granted = await as(admin, (tx) => tx`insert into public.user_roles (user_id, role) values (${other.id}, 'editor') returning granted_by`);
    // Left out, the grantor is the caller.
    expect(granted).toEqual([{ granted_by: admin.id }]);
  });

  it('an admin records a grant as their own, now: not "by" another admin, nor at another time', async () => {
    const admin = await userWith('admin');
    const otherAdmin = await userWith('admin');
    const other = await userWith();
    await denied(as(admin, (tx) => tx`insert into public.user_roles (user_id, role, granted_by) values (${other.id}, 'editor', ${otherAdmin.id})`));
    await denied(as(admin, (tx) => tx`insert into public.user_roles (user_id, role, granted_by) values (${other.id}, 'editor', null)`));
    await denied(as(admin, (tx) => tx`insert into public.user_roles (user_id, role, granted_at) values (${other.id}, 'editor', '2000-01-01')`));
    const named = await as(admin, (tx) => tx`insert into public.user_roles (user_id, role, granted_by) values (${other.id}, 'viewer', ${admin.id}) returning granted_by`);
    expect(named).toEqual([{ granted_by: admin.id }]);
  });

  it('an editor creates a website as themself: not "by" another user, backdated, or already being deleted', async () => {
    const editor = await userWith('editor');
    const victim = await userWith('editor');
    const website = (extra: Record<string, unknown>) => ({
      name: 'Planted',
      domain: 'planted.example.test',
      api_key_hash: randomBytes(32),
      api_key_prefix: 'pk_planted',
      ...extra,
    });
    const insert = (row: Record<string, unknown>) => (tx: postgres.TransactionSql) =>
      tx`insert into public.websites ${tx(row)} returning created_by`;
    await denied(as(editor, insert(website({ created_by: victim.id }))));
    await denied(as(editor, insert(website({ created_by: null }))));
    await denied(as(editor, insert(website({ created_at: '2000-01-01' }))));
    await denied(as(editor, insert(website({ deletion_started_at: new Date() }))));
    await denied(as(editor, insert(website({ id: randomUUID() }))));
    // Left out, the creator is the caller.
    expect(await as(editor, insert(website({})))).toEqual([{ created_by: editor.id }]);
  });

  it('a non-admin reads no log entries and stores none; an admin stores client entries only as themself', async () => {
    const marker = `secret-${randomUUID()}`;
    await sql`insert into public.app_logs (level, message, source) values ('error', ${marker}, 'server')`;
    const entry = (tx: postgres.TransactionSql, userId: string, source = 'client') =>
      tx`insert into public.app_logs (level, message, source, user_id) values ('info', 'from the browser', ${source}::public.log_source, ${userId})`;
    for (const role of NON_ADMINS) {
      const user = await userWith(role);
      expect(await as(user, (tx) => tx`select id from public.app_logs where message = ${marker}`), label(role)).toEqual([]);
      await denied(as(user, (tx) => entry(tx, user.id)));
    }
    const admin = await userWith('admin');
    const other = await userWith();
    await denied(as(admin, (tx) => entry(tx, other.id)));
    await denied(as(admin, (tx) => entry(tx, admin.id, 'server')));
    // The identity column takes its value without any right on its sequence.
    expect((await as(admin, (tx) => entry(tx, admin.id))).count).toBe(1);
  });

  it('no one rewrites another user\'s profile, or their own e-mail or id', async () => {
    const victim = await createAuthUser(sql, { name: 'Victim Name' });
    for (const role of NON_ADMINS) {
      const user = await userWith(role);
      const renamed = await as(user, (tx) => tx`update public.profiles set name = 'Pwned' where id = ${victim.id}`);
      expect(renamed.count, label(role)).toBe(0);
      await denied(as(user, (tx) => tx`update public.profiles set email = ${victim.email} where id = ${user.id}`));
      await denied(as(user, (tx) => tx`update public.profiles set id = ${victim.id} where id = ${user.id}`));
      await denied(as(user, (tx) => tx`delete from public.profiles where id = ${victim.id}`));
      await denied(as(user, (tx) => tx`insert into public.profiles (id, email, name) values (${randomUUID()}, 'x@example.test', 'Forged')`));
    }
    const [profile] = await sql`select name, email from public.profiles where id = ${victim.id}`;
    expect(profile).toEqual({ name: 'Victim Name', email: victim.email });
  });

  it("a user's own name, set through SQL, obeys the API's rule: trimmed, 2 to 100 characters", async () => {
    const user = await userWith();
    for (const name of ['x'.repeat(200_000), 'x'.repeat(101), '\t \n', ' padded ', 'x']) {
      await expect(as(user, (tx) => tx`update public.profiles set name = ${name} where id = ${user.id}`), JSON.stringify(name.slice(0, 10))).rejects.toMatchObject({
        code: '23514',
        constraint_name: 'profiles_name_obeys_the_rule',
      });
    }
    // The control: a name the API would take.
    expect((await as(user, (tx) => tx`update public.profiles set name = ${'Ada Lovelace'} where id = ${user.id}`)).count).toBe(1);
    expect((await as(user, (tx) => tx`update public.profiles set name = ${'é'.repeat(100)} where id = ${user.id}`)).count).toBe(1);
  });

  it('only an admin deletes a website; an editor may change it but not delete it', async () => {
    const websiteId = await createWebsite(sql, 'Delete me not');
    for (const role of NON_ADMINS) {
      const user = await userWith(role);
      expect((await as(user, (tx) => tx`delete from public.websites where id = ${websiteId}`)).count, label(role)).toBe(0);
    }
    const editor = await userWith('editor');
    expect((await as(editor, (tx) => tx`update public.websites set name = 'Edited' where id = ${websiteId}`)).count).toBe(1);
    const admin = await userWith('admin');
    expect((await as(admin, (tx) => tx`delete from public.websites where id = ${websiteId}`)).count).toBe(1);
    expect(await sql`select name from public.websites where id = ${websiteId}`).toEqual([{ name: 'Delete me not' }]);
  });

  it('the feedback outbox is closed to anon and to every signed-in role, admins included', async () => {
    const feedbackId = await feedbackRow();
    for (const role of [...NON_ADMINS, 'admin' as const]) {
      const user = await userWith(role);
      for (const caller of [null, user]) {
        await denied(as(caller, (tx) => tx`select * from public.feedback_outbox where feedback_id = ${feedbackId}`));
        await denied(as(caller, (tx) => tx`update public.feedback_outbox set sent_at = now() where feedback_id = ${feedbackId}`));
        await denied(as(caller, (tx) => tx`delete from public.feedback_outbox where feedback_id = ${feedbackId}`));
        await denied(as(caller, (tx) => tx`insert into public.feedback_outbox (feedback_id) values (${feedbackId})`));
      }
    }
    const [row] = await sql`select attempts, sent_at from public.feedback_outbox where feedback_id = ${feedbackId}`;
    expect(row).toEqual({ attempts: 0, sent_at: null });
  });

  it('a viewer reads websites but writes nothing', async () => {
    const websiteId = await createWebsite(sql, 'Viewed site');
    const feedbackId = await feedbackRow();
    const viewer = await userWith('viewer');
    const other = await userWith();
    expect(await as(viewer, (tx) => tx`select name from public.websites where id = ${websiteId}`)).toEqual([{ name: 'Viewed site' }]);
    const key = randomBytes(16);
    await denied(as(viewer, (tx) => tx`insert into public.websites (name, domain, api_key_hash, api_key_prefix) values ('Mine', 'mine.example.test', ${key}, 'prefix00')`));
    expect((await as(viewer, (tx) => tx`update public.websites set name = 'Viewer was here' where id = ${websiteId}`)).count).toBe(0);
    expect((await as(viewer, (tx) => tx`delete from public.websites where id = ${websiteId}`)).count).toBe(0);
    await denied(
      as(viewer, (tx) => tx`
        insert into public.analytics_events (id, website_id, event_type, page, user_agent, device_type, session_id, visitor_id)
        values (${randomUUID()}, ${websiteId}, 'page_view', '/', 'ua', 'desktop', 's', 'v')`),
    );
    expect((await as(viewer, (tx) => tx`update public.feedback set status = 'archived' where id = ${feedbackId}`)).count).toBe(0);
    await denied(as(viewer, (tx) => tx`insert into public.user_roles (user_id, role) values (${other.id}, 'viewer')`));
    expect((await as(viewer, (tx) => tx`delete from public.user_roles where user_id = ${viewer.id}`)).count).toBe(0);
    await denied(as(viewer, (tx) => tx`insert into public.app_logs (level, message, source, user_id) values ('info', 'x', 'client', ${viewer.id})`));
    expect(await sql`select name from public.websites where id = ${websiteId}`).toEqual([{ name: 'Viewed site' }]);
    expect(await sql`select status::text from public.feedback where id = ${feedbackId}`).toEqual([{ status: 'pending' }]);
  });

  it('anon and signed-in users cannot move the id sequences (setval would break the role and log writers)', async () => {
    const user = await userWith();
    for (const caller of [null, user]) {
      // Harmless even if it were allowed: it only advances the sequence.
      await denied(as(caller, (tx) => tx`select setval('public.role_changes_id_seq', nextval('public.role_changes_id_seq'))`));
      await denied(as(caller, (tx) => tx`select nextval('public.app_logs_id_seq')`));
    }
  });
});
