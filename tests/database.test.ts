import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { asUser, createAuthUser, grantRole, testSql } from './support/db.ts';

// The schema's own guarantees, checked in Postgres itself: the profile
// trigger on auth.users, and row-level security acting as given users.

const sql = testSql();
afterAll(() => sql.end());

describe('profiles mirror auth.users', () => {
  it('a new auth user gets a profile with the sign-up name', async () => {
    const user = await createAuthUser(sql, { name: 'Ada Lovelace' });
    const [profile] = await sql`select * from public.profiles where id = ${user.id}`;
    expect(profile).toMatchObject({ id: user.id, email: user.email, name: 'Ada Lovelace', last_login: null });
    expect(profile.created_at).toBeInstanceOf(Date);
  });

  it('a sign-in (last_sign_in_at) updates last_login, an e-mail change follows', async () => {
    const user = await createAuthUser(sql);
    const signedInAt = new Date('2026-03-04T05:06:07.890Z');
    await sql.begin(async (tx) => {
      await tx`set local role supabase_auth_admin`;
      await tx`update auth.users set last_sign_in_at = ${signedInAt}, email = ${'changed-' + user.email} where id = ${user.id}`;
    });
    const [profile] = await sql`select email, last_login from public.profiles where id = ${user.id}`;
    expect(profile.last_login.toISOString()).toBe(signedInAt.toISOString());
    expect(profile.email).toBe('changed-' + user.email);
  });

  it('an account made elsewhere gets a name of at least 2 characters, whatever its e-mail and metadata', async () => {
    // Made outside our API (an identity provider, the dashboard): no name, a one-letter name, a one-letter e-mail.
    const tag = randomUUID().slice(0, 8);
    const cases: [string | null, Record<string, unknown>, string][] = [
      ['a@x.io', {}, 'user'],
      [`jo${tag}@x.io`, { name: ' J ' }, `jo${tag}`],
      [`k${tag}@x.io`, { full_name: 'Kay Oh' }, 'Kay Oh'],
      [null, { name: '' }, 'user'],
    ];
    for (const [email, metadata, expected] of cases) {
      const { id } = await createAuthUser(sql, { email, metadata });
      const [profile] = await sql`select name from public.profiles where id = ${id}`;
      expect(profile.name, JSON.stringify([email, metadata])).toBe(expected);
      await sql`delete from auth.users where id = ${id}`;
    }
  });

  it('deleting the auth user deletes the profile and roles', async () => {
    const user = await createAuthUser(sql);
    await grantRole(sql, user.id, 'viewer');
    await sql`delete from auth.users where id = ${user.id}`;
    expect(await sql`select 1 from public.profiles where id = ${user.id}`).toHaveLength(0);
    expect(await sql`select 1 from public.user_roles where user_id = ${user.id}`).toHaveLength(0);
  });
});

describe('row-level security on profiles and user_roles', () => {
  it('an authenticated user reads only their own profile', async () => {
    const alice = await createAuthUser(sql);
    const bob = await createAuthUser(sql);
    const seen = await asUser(sql, alice.id, (tx) => tx`select id from public.profiles`);
    expect(seen.map((row) => row.id)).toEqual([alice.id]);
    const other = await asUser(sql, alice.id, (tx) => tx`select id from public.profiles where id = ${bob.id}`);
    expect(other).toHaveLength(0);
  });

  it('anon reads no profile at all', async () => {
    await createAuthUser(sql);
    await expect(asUser(sql, null, (tx) => tx`select id from public.profiles`)).rejects.toMatchObject({ code: '42501' });
  });

  it('a user may rename themself but not someone else, and never change their e-mail', async () => {
    const alice = await createAuthUser(sql);
    const bob = await createAuthUser(sql, { name: 'Bob Original' });
    const renamed = await asUser(sql, alice.id, (tx) => tx`update public.profiles set name = 'Alice New' where id = ${alice.id} returning name`);
    expect(renamed).toEqual([{ name: 'Alice New' }]);
    const touched = await asUser(sql, alice.id, (tx) => tx`update public.profiles set name = 'Hacked' where id = ${bob.id} returning id`);
    expect(touched).toHaveLength(0);
    await expect(
      asUser(sql, alice.id, (tx) => tx`update public.profiles set email = 'x@example.test' where id = ${alice.id}`),
    ).rejects.toMatchObject({ code: '42501' });
  });

  it('a user cannot grant themself a role, even with direct SQL under their claims', async () => {
    const mallory = await createAuthUser(sql);
    await expect(
      asUser(sql, mallory.id, (tx) => tx`insert into public.user_roles (user_id, role) values (${mallory.id}, 'admin')`),
    ).rejects.toMatchObject({ code: '42501' });
    const granted = await sql`select 1 from public.user_roles where user_id = ${mallory.id}`;
    expect(granted).toHaveLength(0);
  });

  it('a user sees their own roles only; an admin sees and grants all', async () => {
    const admin = await createAuthUser(sql);
    const viewer = await createAuthUser(sql);
    await grantRole(sql, admin.id, 'admin');
    await grantRole(sql, viewer.id, 'viewer');
    const viewerSees = await asUser(sql, viewer.id, (tx) => tx`select user_id from public.user_roles`);
    expect(viewerSees.map((row) => row.user_id)).toEqual([viewer.id]);
    const adminSees = await asUser(sql, admin.id, (tx) => tx`select user_id from public.user_roles where user_id in (${admin.id}, ${viewer.id})`);
    expect(adminSees).toHaveLength(2);
    const granted = await asUser(
      sql,
      admin.id,
      (tx) => tx`insert into public.user_roles (user_id, role, granted_by) values (${viewer.id}, 'editor', ${admin.id}) returning role`,
    );
    expect(granted).toEqual([{ role: 'editor' }]);
  });

  it('has_role answers for the caller only', async () => {
    const admin = await createAuthUser(sql);
    await grantRole(sql, admin.id, 'admin');
    const other = await createAuthUser(sql);
    const [asAdmin] = await asUser(sql, admin.id, (tx) => tx`select public.has_role('admin') as yes`);
    const [asOther] = await asUser(sql, other.id, (tx) => tx`select public.has_role('admin') as yes`);
    expect(asAdmin.yes).toBe(true);
    expect(asOther.yes).toBe(false);
  });
});
