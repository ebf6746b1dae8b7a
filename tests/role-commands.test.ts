import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createAuthUser, grantRole } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// The operator's role commands (scripts/role.ts), run as npm runs them,
// against a database of this file's own: "the last admin" is a rule about
// the whole table, which other files change while they run.

const database = usePrivateDatabase('roles');
const sql = () => database.sql;

describe('npm run grant-role and revoke-role', () => {
  async function roleCommand(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) =>
      execFile(
        process.execPath,
        [path.resolve(import.meta.dirname, '../scripts/role.ts'), ...args],
        { env: { PATH: process.env.PATH ?? '', DATABASE_OWNER_URL: database.url }, cwd: '/' },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
      ),
    );
  }
  const rolesOf = async (id: string) => (await sql()`select role::text from public.user_roles where user_id = ${id} order by role`).map((row) => row.role);

  it('grants the role, and says when the account was made and last signed in, so an account made by someone else shows', async () => {
    const user = await createAuthUser(sql(), { name: 'First Admin' });
    const granted = await roleCommand('grant', user.email, 'viewer');
    expect(granted.code, granted.stderr).toBe(0);
    const [profile] = await sql()`select created_at from public.profiles where id = ${user.id}`;
    expect(granted.stdout.trim().split('\n')).toEqual([
      `${user.email} (${user.id}) now has: viewer`,
      `The account was made ${profile.created_at.toISOString()} and last signed in never; if you did not make it then: npm run revoke-role -- ${user.email} viewer`,
    ]);
    expect(await rolesOf(user.id)).toEqual(['viewer']);
  });

  it('an e-mail that two accounts share (single sign-on) changes neither, and names both', async () => {
    const first = await createAuthUser(sql(), { name: 'First Holder' });
    const second = await createAuthUser(sql(), { name: 'Second Holder' });
    // Two accounts, one address in two cases (the auth server's unique index tells case apart; the role commands do not).
    await sql()`update auth.users set email = ${first.email.toUpperCase()} where id = ${second.id}`;
    const refused = await roleCommand('grant', first.email, 'editor');
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim()).toBe(
      `2 accounts have e-mail ${first.email} (${first.id}, ${second.id}); none changed: give the role to the one meant through the API (POST /api/userRoles/:userId).`,
    );
    expect([await rolesOf(first.id), await rolesOf(second.id)]).toEqual([[], []]);
  });

  it('revokes the role it names and keeps the others; the last admin keeps admin, in one line', async () => {
    const user = await createAuthUser(sql(), { name: 'Wrong Account' });
    await grantRole(sql(), user.id, 'viewer');
    await grantRole(sql(), user.id, 'editor');
    const revoked = await roleCommand('revoke', user.email.toUpperCase(), 'viewer');
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout.trim()).toBe(`${user.email.toUpperCase()} (${user.id}) now has: editor`);
    expect(await rolesOf(user.id)).toEqual(['editor']);
    expect((await roleCommand('revoke', user.email, 'editor')).stdout.trim()).toBe(`${user.email} (${user.id}) now has: no role`);

    // This file's database has no other admin.
    const lone = await createAuthUser(sql(), { name: 'Lone Admin' });
    await grantRole(sql(), lone.id, 'admin');
    const refused = await roleCommand('revoke', lone.email, 'admin');
    expect(refused.code).toBe(1);
    expect(refused.stderr.trim()).toBe('npm run revoke-role: the last admin cannot lose the admin role');
    expect(await rolesOf(lone.id)).toEqual(['admin']);
  });

  it('an unknown action, role or missing argument prints the usage, exit code 2', async () => {
    for (const args of [['grant', 'a@example.test'], ['revoke', 'a@example.test', 'owner'], ['promote', 'a@example.test', 'admin']]) {
      const answer = await roleCommand(...args);
      expect(answer.code, args.join(' ')).toBe(2);
      expect(answer.stderr).toMatch(/^usage: npm run (grant|revoke)-role -- <email> <admin\|editor\|viewer>\n$/);
    }
  });
});
