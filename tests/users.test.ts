import type { FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import type { Caller } from '../src/plugins/auth.ts';
import { canSetUserRoles } from '../src/modules/roles/permissions.ts';
import { canChangeUserEmail, canCreateUser, canRenameUser, canViewUser } from '../src/modules/users/permissions.ts';
import { expectRefused, useAdminApp } from './support/admin-auth.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { asUser, createAuthUser, grantRole, testSql, uniqueEmail } from './support/db.ts';
import { call, realAuth, signUp, useRealAuthApp } from './support/real-auth.ts';

// /api/users. Accounts are auth.users rows made the way the auth server
// stores them; the admin credential is the legacy admin token. Paths that
// need the auth server itself (creating an account, changing an e-mail)
// answer 503 here, which is what they do whenever it is not configured.

let app: FastifyInstance;
const sql = testSql();
let admin: { authorization: string };

useAdminApp(sql, (built) => ({ app, admin } = built));

describe('who may do what (the predicates behind guards and services)', () => {
  const user = (userId: string, roles: Caller['roles'] = []): Caller => ({
    kind: 'user',
    userId,
    sessionId: 'session-1',
    roles,
    claims: { sub: userId, session_id: 'session-1' },
  });
  const legacy: Caller = { kind: 'legacy-admin', userId: 'ops', roles: ['admin'] };

  it('lets users see and rename themselves, admins everyone; e-mail, creation and roles are admin only', () => {
    const me = user('a');
    const editor = user('b', ['editor']);
    const boss = user('c', ['admin']);
    expect([canViewUser(me, 'a'), canViewUser(me, 'z'), canViewUser(editor, 'z'), canViewUser(boss, 'z'), canViewUser(legacy, 'z')]).toEqual([
      true,
      false,
      false,
      true,
      true,
    ]);
    expect([canRenameUser(me, 'a'), canRenameUser(me, 'z'), canRenameUser(boss, 'z')]).toEqual([true, false, true]);
    expect([canChangeUserEmail(me), canChangeUserEmail(editor), canChangeUserEmail(boss), canChangeUserEmail(legacy)]).toEqual([false, false, true, true]);
    expect([canCreateUser(me), canCreateUser(boss), canSetUserRoles(editor), canSetUserRoles(legacy)]).toEqual([false, true, false, true]);
  });
});

describe('tokens', () => {
  it.each([
    ['GET', '/api/users/me'],
    ['GET', `/api/users/${crypto.randomUUID()}`],
    ['GET', '/api/users/email/someone@example.test'],
    ['POST', '/api/users'],
    ['PUT', `/api/users/${crypto.randomUUID()}`],
  ] as const)('%s %s refuses missing, garbage and forged tokens with 401', async (method, url) => {
    await expectRefused(app, { method, url, ...(method === 'GET' ? {} : { payload: { name: 'Someone' } }) });
  });

  it('GET /me is for a user session; the legacy admin token is not one', async () => {
    expect((await app.inject({ method: 'GET', url: '/api/users/me', headers: admin })).statusCode).toBe(401);
  });
});

describe('GET /api/users/:id and /email/:email', () => {
  it('returns the profile with its roles', async () => {
    const user = await createAuthUser(sql, { name: 'Lin Profile' });
    await grantRole(sql, user.id, 'viewer');
    const byId = await app.inject({ method: 'GET', url: `/api/users/${user.id}`, headers: admin });
    expect(byId.statusCode).toBe(200);
    expect(byId.json()).toEqual({
      success: true,
      data: { id: user.id, email: user.email, name: 'Lin Profile', createdAt: expect.any(String), lastLogin: null, roles: ['viewer'] },
    });
    const byEmail = await app.inject({ method: 'GET', url: `/api/users/email/${user.email.toUpperCase()}`, headers: admin });
    expect(byEmail.statusCode).toBe(200);
    expect(byEmail.json().data.id).toBe(user.id);
    // An address longer than the router's default path-parameter limit (100 characters).
    const long = await createAuthUser(sql, { email: `${'a'.repeat(20)}-${crypto.randomUUID()}@${'b'.repeat(50)}.example.test` });
    const byLongEmail = await app.inject({ method: 'GET', url: `/api/users/email/${encodeURIComponent(long.email)}`, headers: admin });
    expect(byLongEmail.statusCode).toBe(200);
    expect(byLongEmail.json().data.id).toBe(long.id);
  });

  it('answers 404 for an unknown user and 400 for a malformed id or e-mail', async () => {
    const unknown = await app.inject({ method: 'GET', url: `/api/users/${crypto.randomUUID()}`, headers: admin });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toEqual({ success: false, error: 'User not found', statusCode: 404 });
    expect((await app.inject({ method: 'GET', url: `/api/users/email/${uniqueEmail('nobody')}`, headers: admin })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/api/users/not-a-uuid', headers: admin })).statusCode).toBe(400);
    expect((await app.inject({ method: 'GET', url: '/api/users/email/not-an-email', headers: admin })).statusCode).toBe(400);
  });
});

describe('POST /api/users', () => {
  it('refuses a known e-mail with 409 before asking the auth server', async () => {
    const existing = await createAuthUser(sql);
    const response = await app.inject({
      method: 'POST',
      url: '/api/users',
      headers: admin,
      payload: { email: existing.email, password: 'secret123', name: 'Copy Cat' },
    });
    expect(response.statusCode).toBe(409);
    expect(response.json()).toEqual({ success: false, error: 'User with this email already exists', statusCode: 409 });
  });

  it('validates the body', async () => {
    const response = await app.inject({ method: 'POST', url: '/api/users', headers: admin, payload: { email: 'nope', password: '123', name: 'A' } });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({
      error: 'Validation failed',
      details: { email: ['Invalid email format'], password: ['Password must be at least 6 characters'], name: ['Name must be at least 2 characters'] },
    });
  });

  it('answers a field of the wrong type with one message', async () => {
    const payload = { email: uniqueEmail('typed'), password: 'secret123', name: ['a'] };
    const response = await app.inject({ method: 'POST', url: '/api/users', headers: admin, payload });
    expect(response.statusCode).toBe(400);
    expect(response.json().details).toEqual({ name: ['Name must be a string'] });
  });

  it('answers 503 while no auth server is configured (accounts are created there)', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/api/users',
      headers: admin,
      payload: { email: uniqueEmail('new'), password: 'secret123', name: 'New Person' },
    });
    expect(response.statusCode).toBe(503);
    expect(response.json()).toEqual({ success: false, error: 'Authentication service unavailable', statusCode: 503, requestId: expect.any(String) });
  });
});

describe('PUT /api/users/:id', () => {
  it('renames a user', async () => {
    const user = await createAuthUser(sql, { name: 'Old Name' });
    const response = await app.inject({ method: 'PUT', url: `/api/users/${user.id}`, headers: admin, payload: { name: '  New Name ' } });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toMatchObject({ success: true, message: 'User updated', data: { id: user.id, name: 'New Name', email: user.email } });
    expect((await sql`select name from public.profiles where id = ${user.id}`)[0].name).toBe('New Name');
  });

  it('refuses an e-mail another account holds (409), and needs the auth server for a free one (503)', async () => {
    const [user, other] = [await createAuthUser(sql), await createAuthUser(sql)];
    const taken = await app.inject({ method: 'PUT', url: `/api/users/${user.id}`, headers: admin, payload: { email: other.email } });
    expect(taken.statusCode).toBe(409);
    const free = await app.inject({ method: 'PUT', url: `/api/users/${user.id}`, headers: admin, payload: { email: uniqueEmail('moved') } });
    expect(free.statusCode).toBe(503);
    expect(free.json().error).toBe('Authentication service unavailable');
    // Its own address again changes nothing and needs no auth server.
    const same = await app.inject({ method: 'PUT', url: `/api/users/${user.id}`, headers: admin, payload: { email: user.email, name: 'Same Mail' } });
    expect(same.statusCode).toBe(200);
  });

  it("renames the profile when the auth server cannot take the name into the account's metadata, and says so in the log", async () => {
    // Nothing listens on this port: each call to the auth server is refused.
    const unreachable = `http://127.0.0.1:${await freePort()}`;
    const { app: withAuth, lines } = await buildTestAppWithLog(
      { SUPABASE_URL: unreachable, SUPABASE_ANON_KEY: 'anon-key', SUPABASE_SERVICE_ROLE_KEY: 'service-role-key' },
      'warn',
    );
    try {
      const user = await createAuthUser(sql, { name: 'Before Rename' });
      const response = await withAuth.inject({ method: 'PUT', url: `/api/users/${user.id}`, headers: admin, payload: { name: 'After Rename' } });
      expect(response.statusCode).toBe(200);
      expect(response.json().data.name).toBe('After Rename');
      expect((await sql`select name from public.profiles where id = ${user.id}`)[0].name).toBe('After Rename');
      const warning = lines.map((line) => JSON.parse(line)).find((entry) => entry.msg?.includes('user_metadata keeps the old name'));
      expect(warning).toMatchObject({ level: 40, userId: user.id });
    } finally {
      await withAuth.close();
    }
  });

  it('answers 404 for an unknown user and 400 for an empty change', async () => {
    const unknown = await app.inject({ method: 'PUT', url: `/api/users/${crypto.randomUUID()}`, headers: admin, payload: { name: 'Nobody Here' } });
    expect(unknown.statusCode).toBe(404);
    const user = await createAuthUser(sql);
    const empty = await app.inject({ method: 'PUT', url: `/api/users/${user.id}`, headers: admin, payload: {} });
    expect(empty.statusCode).toBe(400);
    expect(empty.json().error).toBe('Validation failed');
  });
});

const auth = realAuth();

describe.runIf(auth)('their own records by an upper-case id (real sessions)', () => {
  const server = useRealAuthApp(auth!);

  it('GET and PUT /api/users/:id and GET /api/userRoles/:userId: the same user in either case', async () => {
    const { base } = server;
    const me = await signUp(base, 'users-cased');
    const upper = me.id.toUpperCase();
    const read = await call(base, 'GET', `/api/users/${upper}`, { token: me.accessToken });
    expect(read.status, JSON.stringify(read.body)).toBe(200);
    expect(read.body.data).toMatchObject({ id: me.id, email: me.email });
    const renamed = await call(base, 'PUT', `/api/users/${upper}`, { token: me.accessToken, body: { name: 'Upper Case' } });
    expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
    expect(renamed.body.data).toMatchObject({ id: me.id, name: 'Upper Case' });
    const roles = await call(base, 'GET', `/api/userRoles/${upper}`, { token: me.accessToken });
    expect(roles.body).toEqual({ success: true, data: { userId: me.id, roles: [] } });
  });
});

describe('profiles row-level security (what a user session may do in the database)', () => {
  it('lets a user read and rename only themselves; e-mail is not theirs to change; admins see everyone', async () => {
    const [me, other, boss] = [await createAuthUser(sql), await createAuthUser(sql), await createAuthUser(sql)];
    await grantRole(sql, boss.id, 'admin');

    const visible = (userId: string, id: string) =>
      asUser(sql, userId, async (tx) => (await tx`select id from public.profiles where id = ${id}`).length);
    expect(await visible(me.id, me.id)).toBe(1);
    expect(await visible(me.id, other.id)).toBe(0);
    expect(await visible(boss.id, other.id)).toBe(1);

    const rename = (userId: string, id: string) =>
      asUser(sql, userId, async (tx) => (await tx`update public.profiles set name = 'Renamed' where id = ${id}`).count);
    expect(await rename(me.id, me.id)).toBe(1);
    expect(await rename(me.id, other.id)).toBe(0);
    expect(await rename(boss.id, other.id)).toBe(1);

    const changeEmail = await asUser(sql, me.id, (tx) => tx`update public.profiles set email = 'x@example.test' where id = ${me.id}`).catch((e) => e.code);
    expect(changeEmail).toBe('42501');
  });
});
