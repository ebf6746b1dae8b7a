import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { uniqueEmail } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';
import { call, idTokenFor, messagesTo, realAuth, type SignedUp, signUp, useRealAuthApp } from './support/real-auth.ts';

// What our API shows and allows after an admin acts in the Supabase
// dashboard, which calls the auth server's admin API (/auth/v1/admin/users)
// with the service-role key: bans, deletions, e-mail, password and metadata
// changes, invitations and accounts made there. docs/accounts.md, "Accounts
// changed in the Supabase dashboard".

const auth = realAuth();

/** The auth server's admin API, as the dashboard calls it. */
async function adminApi(path: string, method: string, body?: unknown): Promise<{ status: number; body: any }> {
  const response = await fetch(`${auth!.url}/auth/v1${path}`, {
    method,
    headers: { apikey: auth!.serviceRoleKey, authorization: `Bearer ${auth!.serviceRoleKey}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: response.status, body: await response.json().catch(() => null) };
}

const updateUser = (id: string, body: unknown) => adminApi(`/admin/users/${id}`, 'PUT', body);

/** Sessions found open are trusted for 5 s (docs/accounts.md): what the admin did shows within that. */
const WITHIN_SESSION_CACHE = { timeout: 7_000, interval: 250 };

describe.runIf(auth)('after an admin acts in the Supabase dashboard (real auth server)', () => {
  const server = useRealAuthApp(auth!);
  let sql: postgres.Sql;
  let admin: SignedUp;
  const get = (path: string, token: string) => call(server.base, 'GET', path, { token });
  const statusOf = async (path: string, token: string) => (await get(path, token)).status;

  beforeAll(async () => {
    sql = postgres(inject('stack').databaseUrl, { max: 2, onnotice: () => {} });
    admin = await signUp(server.base, 'dash-admin', 'Dashboard Admin');
    await sql`insert into public.user_roles (user_id, role) values (${admin.id}, 'admin')`;
  }, 60_000);
  afterAll(async () => sql?.end());

  it('a ban (ban_duration) refuses the live access tokens within the session cache, on every route; refresh and sign-in too; lifting it lets the session work again', { timeout: 30_000 }, async () => {
    const user = await signUp(server.base, 'dash-banned');
    await sql`insert into public.user_roles (user_id, role) values (${user.id}, 'editor')`;
    expect(await statusOf('/api/websites', user.accessToken)).toBe(200);

    expect((await updateUser(user.id, { ban_duration: '24h' })).status).toBe(200);
    await expect.poll(() => statusOf('/api/auth/me', user.accessToken), WITHIN_SESSION_CACHE).toBe(401);
    for (const path of ['/api/websites', '/api/users/me', `/api/users/${user.id}`, `/api/userRoles/${user.id}`]) {
      expect(await statusOf(path, user.accessToken), path).toBe(401);
    }
    const refreshed = await call(server.base, 'POST', '/api/auth/refresh', { body: { refreshToken: user.refreshToken } });
    expect(refreshed.body).toEqual({ success: false, error: 'Invalid or expired refresh token', statusCode: 401 });
    expect((await call(server.base, 'POST', '/api/auth/signin', { body: { email: user.email, password: user.password } })).status).toBe(401);
    // The admins still see the account, with its roles.
    expect((await get(`/api/users/${user.id}`, admin.accessToken)).body.data).toMatchObject({ id: user.id, roles: ['editor'] });

    expect((await updateUser(user.id, { ban_duration: 'none' })).status).toBe(200);
    await expect.poll(() => statusOf('/api/websites', user.accessToken), WITHIN_SESSION_CACHE).toBe(200);
  });

  it('a password set by an admin ends every session: access and refresh tokens refused; the new password signs in', { timeout: 20_000 }, async () => {
    const user = await signUp(server.base, 'dash-password');
    expect((await updateUser(user.id, { password: 'set-by-admin-1' })).status).toBe(200);
    await expect.poll(() => statusOf('/api/auth/me', user.accessToken), WITHIN_SESSION_CACHE).toBe(401);
    expect((await call(server.base, 'POST', '/api/auth/refresh', { body: { refreshToken: user.refreshToken } })).status).toBe(401);
    expect((await call(server.base, 'POST', '/api/auth/signin', { body: { email: user.email, password: user.password } })).status).toBe(401);
    expect((await call(server.base, 'POST', '/api/auth/signin', { body: { email: user.email, password: 'set-by-admin-1' } })).status).toBe(200);
  });

  it("an admin signing a user out everywhere ends each of the user's sessions here", { timeout: 20_000 }, async () => {
    const user = await signUp(server.base, 'dash-signout');
    const second = await call(server.base, 'POST', '/api/auth/signin', { body: { email: user.email, password: user.password } });
    const secondToken: string = second.body.data.session.accessToken;
    // supabase-js's auth.admin.signOut(jwt, 'global'): the service key as apikey, the user's token as bearer.
    const ended = await fetch(`${auth!.url}/auth/v1/logout?scope=global`, {
      method: 'POST',
      headers: { apikey: auth!.serviceRoleKey, authorization: `Bearer ${user.accessToken}` },
    });
    expect(ended.status).toBe(204);
    await expect.poll(() => statusOf('/api/auth/me', user.accessToken), WITHIN_SESSION_CACHE).toBe(401);
    await expect.poll(() => statusOf('/api/auth/me', secondToken), WITHIN_SESSION_CACHE).toBe(401);
  });

  it("a deleted account: tokens refused, profile and roles gone; the feedback it resolved still reads; the roles it granted are not recorded as changed", { timeout: 30_000 }, async () => {
    const departing = await signUp(server.base, 'dash-departing', 'Departing Admin');
    await sql`insert into public.user_roles (user_id, role) values (${departing.id}, 'admin')`;
    const viewer = await signUp(server.base, 'dash-granted');
    const granted = await call(server.base, 'POST', `/api/userRoles/${viewer.id}`, { token: departing.accessToken, body: { roles: ['viewer'] } });
    expect(granted.status, JSON.stringify(granted.body)).toBe(200);
    const [feedback] = await sql<{ id: string }[]>`
      insert into public.feedback (name, email, comment, rating) values ('Fay', 'fay@example.test', 'The contact form is broken', 2) returning id`;
    const resolved = await call(server.base, 'PUT', `/api/feedback/${feedback.id}`, { token: departing.accessToken, body: { status: 'resolved' } });
    expect(resolved.status, JSON.stringify(resolved.body)).toBe(200);

    expect((await adminApi(`/admin/users/${departing.id}`, 'DELETE')).status).toBe(200);
    await expect.poll(() => statusOf('/api/auth/me', departing.accessToken), WITHIN_SESSION_CACHE).toBe(401);
    expect(await statusOf('/api/admin/users', departing.accessToken)).toBe(401);
    expect(await statusOf(`/api/users/${departing.id}`, admin.accessToken)).toBe(404);
    expect((await get(`/api/admin/users?search=${encodeURIComponent(departing.email)}`, admin.accessToken)).body.data).toEqual([]);
    expect(await sql`select 1 from public.user_roles where user_id = ${departing.id}`).toHaveLength(0);

    const item = await get(`/api/feedback/${feedback.id}`, admin.accessToken);
    expect(item.status).toBe(200);
    expect(item.body.data).toMatchObject({ status: 'resolved', resolvedBy: departing.id });
    // What the departing admin gave stays given, and is recorded once: granted, by them.
    expect((await get(`/api/userRoles/${viewer.id}`, admin.accessToken)).body.data).toEqual({ userId: viewer.id, roles: ['viewer'] });
    const changes = await sql`select role, action, changed_by from public.role_changes where user_id = ${viewer.id} order by id`;
    expect(changes).toEqual([{ role: 'viewer', action: 'granted', changed_by: departing.id }]);
  });

  it('a soft-deleted account (should_soft_delete) leaves the lists and loses its roles, as a deleted one does', { timeout: 30_000 }, async () => {
    const name = `Soft ${randomUUID().slice(0, 8)}`;
    const user = await signUp(server.base, 'dash-soft', name);
    await sql`insert into public.user_roles (user_id, role) values (${user.id}, 'viewer')`;
    expect((await get(`/api/admin/users?search=${encodeURIComponent(name)}`, admin.accessToken)).body.data).toHaveLength(1);

    const deleted = await adminApi(`/admin/users/${user.id}`, 'DELETE', { should_soft_delete: true });
    expect(deleted.status).toBe(200);
    expect((await sql`select deleted_at from auth.users where id = ${user.id}`)[0].deleted_at).not.toBeNull();
    await expect.poll(() => statusOf('/api/auth/me', user.accessToken), WITHIN_SESSION_CACHE).toBe(401);
    expect((await get(`/api/admin/users?search=${encodeURIComponent(name)}`, admin.accessToken)).body.data).toEqual([]);
    expect(await statusOf(`/api/users/${user.id}`, admin.accessToken)).toBe(404);
    expect(await sql`select 1 from public.user_roles where user_id = ${user.id}`).toHaveLength(0);
  });

  it('an e-mail changed, and confirmed, by an admin: the profile follows; the sessions go on', async () => {
    const user = await signUp(server.base, 'dash-mail');
    const moved = uniqueEmail('dash-mail-moved');
    expect((await updateUser(user.id, { email: moved.toUpperCase(), email_confirm: true })).status).toBe(200);
    const me = await get('/api/auth/me', user.accessToken);
    expect(me.status).toBe(200);
    expect(me.body.data.email).toBe(moved);
    expect((await get(`/api/users/email/${moved}`, admin.accessToken)).body.data.id).toBe(user.id);
    expect((await call(server.base, 'POST', '/api/auth/signin', { body: { email: moved, password: user.password } })).status).toBe(200);
  });

  it('user_metadata.name changed by an admin: the profile follows, trimmed, when it has 2 to 100 characters; other metadata changes leave the name alone', async () => {
    const user = await signUp(server.base, 'dash-renamed', 'Signed Up Name');
    const nameSeen = async () => (await get('/api/auth/me', user.accessToken)).body.data.name;

    expect((await updateUser(user.id, { user_metadata: { name: '  Dana\tAdmin-Given \n' } })).status).toBe(200);
    expect(await nameSeen()).toBe('Dana\tAdmin-Given');
    expect((await get(`/api/users/${user.id}`, admin.accessToken)).body.data.name).toBe('Dana\tAdmin-Given');
    // Stored as given, as PUT /api/users/:id stores a name: JSON out, escaping is the page's.
    expect((await updateUser(user.id, { user_metadata: { name: '<b>Dana</b>' } })).status).toBe(200);
    expect(await nameSeen()).toBe('<b>Dana</b>');
    // Outside the rule: the profile keeps its name.
    for (const refused of ['\u00a0\tX\n', 'y'.repeat(101), 42]) {
      expect((await updateUser(user.id, { user_metadata: { name: refused } })).status).toBe(200);
      expect(await nameSeen(), String(refused)).toBe('<b>Dana</b>');
    }
    // A change of other metadata, and the e-mail confirmation (which writes email_verified there), are no rename.
    expect((await call(server.base, 'PUT', `/api/users/${user.id}`, { token: user.accessToken, body: { name: 'Chosen By User' } })).status).toBe(200);
    expect((await updateUser(user.id, { user_metadata: { plan: 'pro' }, email_confirm: true })).status).toBe(200);
    expect(await nameSeen()).toBe('Chosen By User');
    expect((await call(server.base, 'POST', '/api/auth/signin', { body: { email: user.email, password: user.password } })).body.data.user.name).toBe('Chosen By User');
  });

  it("a rename through PUT /api/users/:id reaches the account's user_metadata: the dashboard and the user's next tokens show it, the other metadata stays", { timeout: 20_000 }, async () => {
    const user = await signUp(server.base, 'dash-renamed-here', 'Signed Up Name');
    expect((await updateUser(user.id, { user_metadata: { plan: 'pro' } })).status).toBe(200);
    const dashboardMetadata = async () => (await adminApi(`/admin/users/${user.id}`, 'GET')).body.user_metadata;

    // Before: the dashboard kept showing the name signed up with.
    expect((await call(server.base, 'PUT', `/api/users/${user.id}`, { token: user.accessToken, body: { name: 'Renamed Here' } })).status).toBe(200);
    expect(await dashboardMetadata()).toMatchObject({ name: 'Renamed Here', plan: 'pro' });
    const refreshed = await call(server.base, 'POST', '/api/auth/refresh', { body: { refreshToken: user.refreshToken } });
    const claims = JSON.parse(Buffer.from(refreshed.body.data.session.accessToken.split('.')[1], 'base64url').toString());
    expect(claims.user_metadata.name).toBe('Renamed Here');

    // An admin's rename of another user, the same way; the profile keeps the name given.
    expect((await call(server.base, 'PUT', `/api/users/${user.id}`, { token: admin.accessToken, body: { name: 'Renamed By Admin Here' } })).status).toBe(200);
    expect(await dashboardMetadata()).toMatchObject({ name: 'Renamed By Admin Here', plan: 'pro' });
    expect((await get('/api/auth/me', refreshed.body.data.session.accessToken)).body.data.name).toBe('Renamed By Admin Here');
  });

  it("an identity provider's name, written into the metadata at each sign-in with it, does not replace the name the user chose", { timeout: 30_000 }, async () => {
    const user = await signUp(server.base, 'dash-linker', 'Signed Up Name');
    expect((await call(server.base, 'PUT', `/api/users/${user.id}`, { token: user.accessToken, body: { name: 'Chosen Name' } })).status).toBe(200);
    const idpEmail = uniqueEmail('dash-idp');
    const linked = await call(server.base, 'POST', '/api/auth/link', { token: user.accessToken, body: { provider: 'keycloak', token: await idTokenFor(auth!, idpEmail) } });
    expect(linked.status, JSON.stringify(linked.body)).toBe(200);
    // A front end signs in with the provider at the auth server (supabase-js signInWithIdToken).
    const signedIn = await fetch(`${auth!.url}/auth/v1/token?grant_type=id_token`, {
      method: 'POST',
      headers: { apikey: auth!.anonKey, 'content-type': 'application/json' },
      body: JSON.stringify({ provider: 'keycloak', id_token: await idTokenFor(auth!, idpEmail) }),
    });
    expect(signedIn.status).toBe(200);
    const { access_token: providerToken } = (await signedIn.json()) as { access_token: string };
    // The auth server copied the provider's name (the issuer's: the local part) into the metadata.
    const [row] = await sql`select raw_user_meta_data ->> 'name' as name from auth.users where id = ${user.id}`;
    expect(row.name).toBe(idpEmail.split('@')[0]);
    expect((await get('/api/auth/me', providerToken)).body.data).toMatchObject({ id: user.id, name: 'Chosen Name' });
    // An admin's rename after it is followed.
    expect((await updateUser(user.id, { user_metadata: { name: 'Renamed By Admin' } })).status).toBe(200);
    expect((await get('/api/auth/me', user.accessToken)).body.data.name).toBe('Renamed By Admin');
  });

  it('accounts made by an admin without a usable name get one that keeps the name rule (2 to 100 characters, trimmed); they sign in and /me works', async () => {
    const cases = [
      { label: 'dash-nameless', metadata: undefined, expected: (email: string) => email.split('@')[0] },
      { label: 'dash-spaces', metadata: { name: '\t\tA\n' }, expected: (email: string) => email.split('@')[0] },
      { label: 'dash-long', metadata: { name: 'z'.repeat(500) }, expected: (email: string) => email.split('@')[0] },
      { label: 'dash-oidc', metadata: { full_name: ' Full Name ' }, expected: () => 'Full Name' },
    ];
    for (const { label, metadata, expected } of cases) {
      const email = uniqueEmail(label);
      const created = await adminApi('/admin/users', 'POST', { email, password: 'made-by-admin', email_confirm: true, ...(metadata ? { user_metadata: metadata } : {}) });
      expect(created.status, label).toBe(200);
      const signedIn = await call(server.base, 'POST', '/api/auth/signin', { body: { email, password: 'made-by-admin' } });
      expect(signedIn.status, label).toBe(200);
      expect(signedIn.body.data.user.name, label).toBe(expected(email));
      const me = await get('/api/auth/me', signedIn.body.data.session.accessToken);
      expect(me.body.data, label).toMatchObject({ id: created.body.id, email, name: expected(email), roles: ['user'], lastLogin: expect.any(String) });
    }
  });

  it('an invited account: a valid profile at once; the accepted invitation is a session that /me answers', { timeout: 20_000 }, async () => {
    const email = uniqueEmail('dash-invited');
    const invited = await adminApi('/invite', 'POST', { email });
    expect(invited.status).toBe(200);
    const listed = await get(`/api/admin/users?search=${encodeURIComponent(email)}`, admin.accessToken);
    expect(listed.body.data).toEqual([{ id: invited.body.id, email, name: email.split('@')[0], createdAt: expect.any(String), lastLogin: null, roles: [] }]);

    await expect.poll(async () => (await messagesTo(email)).length, { timeout: 5_000 }).toBe(1);
    const [mail] = await messagesTo(email);
    const tokenHash = mail.html.match(/[?&;]token=([0-9a-f]+)/)?.[1];
    expect(tokenHash, mail.html).toBeDefined();
    const accepted = await fetch(`${auth!.url}/auth/v1/verify`, {
      method: 'POST',
      headers: { apikey: auth!.anonKey, 'content-type': 'application/json' },
      body: JSON.stringify({ type: 'invite', token_hash: tokenHash }),
    });
    expect(accepted.status).toBe(200);
    const session = (await accepted.json()) as { access_token: string };
    const me = await get('/api/auth/me', session.access_token);
    expect(me.status).toBe(200);
    expect(me.body.data).toMatchObject({ id: invited.body.id, email, name: email.split('@')[0], lastLogin: expect.any(String) });
  });
});

// The same rules in SQL, on the first generation of the auth tables (the
// local stack without an auth server): they hold there too, and a
// soft-deleted last admin is a deleted account, not a refused revocation.
describe("the profile triggers' rules on a database of this file's own", () => {
  const database = usePrivateDatabase('dashboard');
  const asAuthServer = <T>(work: (tx: postgres.TransactionSql) => Promise<T>) =>
    database.sql.begin(async (tx) => {
      await tx`set local role supabase_auth_admin`;
      return work(tx);
    }) as Promise<T>;
  const createUser = async (email: string, metadata: Record<string, unknown>) => {
    const id = randomUUID();
    await asAuthServer(
      (tx) => tx`insert into auth.users (instance_id, id, aud, role, email, raw_user_meta_data, created_at, updated_at)
                 values ('00000000-0000-0000-0000-000000000000', ${id}, 'authenticated', 'authenticated', ${email}, ${tx.json(metadata as postgres.JSONValue)}, now(), now())`,
    );
    return id;
  };
  const profileOf = async (id: string) => (await database.sql`select email, name from public.profiles where id = ${id}`)[0];

  it('names: trimmed as JavaScript trims, 2 to 100 characters, else the next candidate; a rename in the metadata is followed by the same rule', async () => {
    const spaced = await createUser('spaced@example.test', { name: '\u3000\t\u00a0Al\u2028' });
    expect((await profileOf(spaced)).name).toBe('Al');
    const blank = await createUser('b@example.test', { name: ' \tA\n' });
    expect((await profileOf(blank)).name).toBe('user');
    const long = await createUser('long-one@example.test', { name: 'n'.repeat(101) });
    expect((await profileOf(long)).name).toBe('long-one');

    await asAuthServer((tx) => tx`update auth.users set raw_user_meta_data = ${tx.json({ name: '  New Name  ' })} where id = ${long}`);
    expect((await profileOf(long)).name).toBe('New Name');
    await asAuthServer((tx) => tx`update auth.users set raw_user_meta_data = ${tx.json({ name: ' X ' })} where id = ${long}`);
    expect((await profileOf(long)).name).toBe('New Name');
    // This generation of auth.users has no deleted_at: an e-mail change still reaches the profile.
    await asAuthServer((tx) => tx`update auth.users set email = 'moved-one@example.test', last_sign_in_at = now() where id = ${long}`);
    expect(await profileOf(long)).toEqual({ email: 'moved-one@example.test', name: 'New Name' });
    // An address removed (an account that signs in by phone) leaves none behind, as an account made
    // without one has '' (which admin_notification_emails skips), so no notification goes to the old one.
    await asAuthServer((tx) => tx`update auth.users set email = null where id = ${long}`);
    expect(await profileOf(long)).toEqual({ email: '', name: 'New Name' });
  });

  it('a soft-deleted account loses its profile and roles, even as the last admin; a live last admin still cannot lose the role', async () => {
    // The column the auth server's own migrations add.
    await database.sql`alter table auth.users add column if not exists deleted_at timestamptz`;
    const lastAdmin = await createUser('last-admin@example.test', { name: 'Last Admin' });
    await database.sql`insert into public.user_roles (user_id, role) values (${lastAdmin}, 'admin')`;
    await expect(database.sql`delete from public.user_roles where user_id = ${lastAdmin}`).rejects.toMatchObject({ code: 'PT409' });

    // The auth server's soft delete: the e-mail replaced by a hash and deleted_at set, in one statement.
    await asAuthServer((tx) => tx`update auth.users set email = 'bG9zdC1hZGRyZXNz', deleted_at = now() where id = ${lastAdmin}`);
    expect(await profileOf(lastAdmin)).toBeUndefined();
    expect(await database.sql`select 1 from public.user_roles where user_id = ${lastAdmin}`).toHaveLength(0);
    expect(await database.sql`select action from public.role_changes where user_id = ${lastAdmin} order by id`).toEqual([{ action: 'granted' }, { action: 'revoked' }]);
  });

  it('a banned admin is not the admin who lets the last one in use step down; a banned admin may lose the role while another admin remains, never the last of all', async () => {
    // The columns the auth server's own migrations add.
    await database.sql`alter table auth.users add column if not exists banned_until timestamptz`;
    await database.sql`alter table auth.users add column if not exists deleted_at timestamptz`;
    const [inUse, banned, alsoBanned] = [
      await createUser('admin-in-use@example.test', { name: 'In Use' }),
      await createUser('admin-banned@example.test', { name: 'Banned' }),
      await createUser('admin-also-banned@example.test', { name: 'Also Banned' }),
    ];
    for (const id of [inUse, banned]) await database.sql`insert into public.user_roles (user_id, role) values (${id}, 'admin')`;
    const ban = (id: string, until: string) =>
      asAuthServer((tx) => tx`update auth.users set banned_until = now() + ${until}::interval where id = ${id}`);
    const revokeAdmin = (id: string) => database.sql`delete from public.user_roles where user_id = ${id} and role = 'admin'`;
    const admins = async () => (await database.sql`select user_id from public.user_roles where role = 'admin'`).map((r) => r.user_id).sort();

    await ban(banned, '1 day');
    // Before: allowed, and no one could use the admin routes until the ban ended.
    await expect(revokeAdmin(inUse)).rejects.toMatchObject({ code: 'PT409' });
    // The admins in use stay as many: the banned admin's role may go.
    await revokeAdmin(banned);
    expect(await admins()).toEqual([inUse]);

    // A ban that has run out is no ban.
    await database.sql`insert into public.user_roles (user_id, role) values (${banned}, 'admin')`;
    await ban(banned, '-1 minute');
    await revokeAdmin(inUse);
    expect(await admins()).toEqual([banned]);

    // Every admin banned: one may go while another remains, the last of all keeps it.
    await database.sql`insert into public.user_roles (user_id, role) values (${alsoBanned}, 'admin')`;
    await ban(banned, '1 day');
    await ban(alsoBanned, '1 day');
    await revokeAdmin(alsoBanned);
    await expect(revokeAdmin(banned)).rejects.toMatchObject({ code: 'PT409' });
    expect(await admins()).toEqual([banned]);
  });
});
