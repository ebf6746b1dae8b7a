import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { uniqueEmail } from './support/db.ts';
import { call, realAuth, realAuthEnv, type SignedUp, signUp, startAuthGateway } from './support/real-auth.ts';

// Real Supabase sessions on the role-guarded routes, over HTTP: a signed-in
// user without a role gets 403, roles granted by an admin through the API
// take effect, and the admin routes that call the auth server (creating an
// account, changing an e-mail) work against it.

const auth = realAuth();

describe.runIf(auth)('real sessions and roles', () => {
  let app: FastifyInstance;
  let sql: postgres.Sql;
  let base: string;
  let admin: SignedUp;

  beforeAll(async () => {
    app = await buildTestApp(realAuthEnv(auth!));
    base = await app.listen({ host: '127.0.0.1', port: 0 });
    sql = postgres(inject('stack').databaseUrl, { max: 2, onnotice: () => {} });
    // The first admin is made the way `npm run grant-role` makes one.
    admin = await signUp(base, 'roles-admin', 'Root Admin');
    await sql`insert into public.user_roles (user_id, role) values (${admin.id}, 'admin')`;
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await sql?.end();
  });

  const grant = (userId: string, roles: string[]) => call(base, 'POST', `/api/userRoles/${userId}`, { token: admin.accessToken, body: { roles } });

  it('a signed-in user without a role: 403 on reader, writer and admin routes; 200 on their own records', async () => {
    const user = await signUp(base, 'roles-none');
    for (const [method, path] of [
      ['GET', '/api/websites'],
      ['GET', '/api/feedback/get-feedback'],
      ['GET', '/api/admin/users'],
      ['GET', '/api/analytics?websiteId=00000000-0000-0000-0000-000000000000'],
    ] as const) {
      const answer = await call(base, method, path, { token: user.accessToken });
      expect(answer.status, `${method} ${path}`).toBe(403);
      expect(answer.body).toMatchObject({ success: false, statusCode: 403 });
    }
    expect((await call(base, 'GET', '/api/users/me', { token: user.accessToken })).body.data).toMatchObject({ id: user.id, email: user.email });
    expect((await call(base, 'GET', `/api/userRoles/${user.id}`, { token: user.accessToken })).body.data).toEqual({ userId: user.id, roles: [] });
    // Nobody grants themself a role.
    expect((await call(base, 'POST', `/api/userRoles/${user.id}`, { token: user.accessToken, body: { roles: ['admin'] } })).status).toBe(403);
    expect((await call(base, 'GET', `/api/users/${admin.id}`, { token: user.accessToken })).status).toBe(403);
    // A profile form sends the whole profile back: their own address, unchanged, is no e-mail change.
    const renamed = await call(base, 'PUT', `/api/users/${user.id}`, { token: user.accessToken, body: { name: 'Renamed Self', email: user.email.toUpperCase() } });
    expect(renamed.status, JSON.stringify(renamed.body)).toBe(200);
    expect(renamed.body.data).toMatchObject({ id: user.id, email: user.email, name: 'Renamed Self' });
    const moved = await call(base, 'PUT', `/api/users/${user.id}`, { token: user.accessToken, body: { email: uniqueEmail('moved-self') } });
    expect(moved.status).toBe(403);
    expect(moved.body).toEqual({ success: false, error: 'Only an admin may change an e-mail address', statusCode: 403 });
  });

  it("a session lookup that this instance's sign-out overtook does not put the session back: the token is refused at once", async () => {
    const user = await signUp(base, 'roles-overtaken');
    // The next session lookup's answer reaches the auth plugin only when let go, as over a slow round trip.
    const bounded = app.db.bounded;
    const lookupAnswered = Promise.withResolvers<void>();
    const letGo = Promise.withResolvers<void>();
    let armed = true;
    app.db.bounded = ((query: Parameters<typeof bounded>[0]) => {
      const rows = bounded(query);
      const text = (query as unknown as { strings?: readonly string[] }).strings?.join('') ?? '';
      if (!armed || !text.includes('session_is_open')) return rows;
      armed = false;
      return rows.then(async (answer) => {
        lookupAnswered.resolve();
        await letGo.promise;
        return answer;
      });
    }) as typeof bounded;
    try {
      const inFlight = call(base, 'GET', '/api/auth/me', { token: user.accessToken });
      await lookupAnswered.promise;
      expect((await call(base, 'POST', '/api/auth/signout', { token: user.accessToken })).status).toBe(200);
      expect((await call(base, 'GET', '/api/auth/me', { token: user.accessToken })).status).toBe(401);
      letGo.resolve();
      // The request already under way when the session ended is answered as it began.
      expect((await inFlight).status).toBe(200);
      expect((await call(base, 'GET', '/api/auth/me', { token: user.accessToken })).status).toBe(401);
    } finally {
      app.db.bounded = bounded;
    }
  });

  it('roles granted by an admin take effect: a viewer reads websites, an editor creates them, neither deletes', { timeout: 20_000 }, async () => {
    const viewer = await signUp(base, 'roles-viewer');
    const editor = await signUp(base, 'roles-editor');
    expect((await grant(viewer.id, ['viewer'])).status).toBe(200);
    expect((await grant(editor.id, ['editor'])).status).toBe(200);

    await expect.poll(async () => (await call(base, 'GET', '/api/websites', { token: viewer.accessToken })).status, { timeout: 7_000 }).toBe(200);
    const site = { name: 'Portfolio', domain: `site-${Date.now()}.example.com` };
    expect((await call(base, 'POST', '/api/websites', { token: viewer.accessToken, body: site })).status).toBe(403);
    // Roles are read with the session check, cached for up to 5 s.
    await expect.poll(async () => (await call(base, 'POST', '/api/websites', { token: editor.accessToken, body: site })).status, { timeout: 7_000 }).toBe(201);
    const [row] = await sql`select id from public.websites where domain = ${site.domain}`;
    expect((await call(base, 'DELETE', `/api/websites/${row.id}`, { token: editor.accessToken })).status).toBe(403);
    expect((await call(base, 'DELETE', `/api/websites/${row.id}`, { token: admin.accessToken })).status).toBe(200);

    const me = await call(base, 'GET', '/api/auth/me', { token: editor.accessToken });
    expect(me.body.data.roles).toEqual(['user', 'editor']);
  });

  it('an admin steps down to editor while another admin remains: 200, and the admin routes are closed to them', { timeout: 20_000 }, async () => {
    const second = await signUp(base, 'roles-second-admin');
    expect((await grant(second.id, ['admin'])).status).toBe(200);
    await expect.poll(async () => (await call(base, 'GET', '/api/admin/users', { token: second.accessToken })).status, { timeout: 7_000 }).toBe(200);
    // Their own request: the insert policy asks for the admin row the replacement removes.
    const stepDown = await call(base, 'POST', `/api/userRoles/${second.id}`, { token: second.accessToken, body: { roles: ['editor'] } });
    expect(stepDown.status, JSON.stringify(stepDown.body)).toBe(200);
    expect(stepDown.body.data).toEqual({ userId: second.id, roles: ['editor'] });
    await expect.poll(async () => (await call(base, 'GET', '/api/admin/users', { token: second.accessToken })).status, { timeout: 7_000 }).toBe(403);
  });

  it('an admin creates an account through the auth server, and changes its e-mail; the profile follows', async () => {
    const email = uniqueEmail('created');
    const created = await call(base, 'POST', '/api/users', { token: admin.accessToken, body: { email, password: 'created-secret', name: 'New Person' } });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({ email, name: 'New Person' });
    const id = created.body.data.id;
    expect((await call(base, 'POST', '/api/auth/signin', { body: { email, password: 'created-secret' } })).status).toBe(200);
    expect((await call(base, 'POST', '/api/users', { token: admin.accessToken, body: { email, password: 'created-secret', name: 'Twice' } })).status).toBe(409);

    const newEmail = uniqueEmail('renamed');
    const changed = await call(base, 'PUT', `/api/users/${id}`, { token: admin.accessToken, body: { email: newEmail } });
    expect(changed.status).toBe(200);
    expect(changed.body.data.email).toBe(newEmail);
    const [profile] = await sql`select email from public.profiles where id = ${id}`;
    expect(profile.email).toBe(newEmail);
    expect((await call(base, 'POST', '/api/auth/signin', { body: { email: newEmail, password: 'created-secret' } })).status).toBe(200);
    expect((await call(base, 'POST', '/api/auth/signin', { body: { email, password: 'created-secret' } })).status).toBe(401);
  });

  it('one address asked for by several requests at once: one account, and 409 for the others (not 503)', { timeout: 20_000 }, async () => {
    const statusesOf = async (answers: Promise<{ status: number; body: any }>[]) => {
      const settled = await Promise.all(answers);
      for (const answer of settled.filter((answer) => answer.status === 409)) {
        expect(answer.body).toEqual({ success: false, error: 'User with this email already exists', statusCode: 409 });
      }
      return settled.map((answer) => answer.status).sort();
    };
    const signUpEmail = uniqueEmail('race-signup');
    const signUps = Array.from({ length: 6 }, () => call(base, 'POST', '/api/auth/signup', { body: { email: signUpEmail, password: 'race-secret', name: 'Race Signup' } }));
    expect(await statusesOf(signUps)).toEqual([201, 409, 409, 409, 409, 409]);

    const createdEmail = uniqueEmail('race-create');
    const creations = Array.from({ length: 6 }, () =>
      call(base, 'POST', '/api/users', { token: admin.accessToken, body: { email: createdEmail, password: 'race-secret', name: 'Race Create' } }),
    );
    expect(await statusesOf(creations)).toEqual([201, 409, 409, 409, 409, 409]);

    // Three accounts moved to one new address at once.
    const movers = await Promise.all(['race-move-a', 'race-move-b', 'race-move-c'].map((label) => signUp(base, label)));
    const movedEmail = uniqueEmail('race-moved');
    const moves = movers.map((mover) => call(base, 'PUT', `/api/users/${mover.id}`, { token: admin.accessToken, body: { email: movedEmail } }));
    expect(await statusesOf(moves)).toEqual([200, 409, 409]);

    const accounts = await sql`select email from auth.users where email in (${signUpEmail}, ${createdEmail}, ${movedEmail})`;
    expect(accounts).toHaveLength(3);
  });

  it("the auth server's own 500 (its database refused the write) is a 500 in the SPEC's words, not 503 unavailable", { timeout: 20_000 }, async () => {
    // A real 500 from the real server: a trigger refuses a new account's row,
    // and any change to the admin's (a sign-in or a reset writes to it), as a
    // full disk or a broken migration would.
    const refusedEmail = uniqueEmail('refused-on-insert');
    await sql.unsafe(`
      create function public.refuse_account_writes() returns trigger language plpgsql as $$
        begin
          if (tg_op = 'INSERT' and new.email = '${refusedEmail}') or (tg_op = 'UPDATE' and new.email = '${admin.email}') then
            raise exception 'refused for the test';
          end if;
          return new;
        end $$;
      create trigger refuse_account_writes before insert or update on auth.users for each row execute function public.refuse_account_writes();`);
    try {
      const signUpAnswer = await call(base, 'POST', '/api/auth/signup', { body: { email: refusedEmail, password: 'refused-secret', name: 'Refused Person' } });
      expect(signUpAnswer.status, JSON.stringify(signUpAnswer.body)).toBe(500);
      expect(signUpAnswer.body).toEqual({ success: false, error: 'Failed to register user', statusCode: 500, requestId: expect.any(String) });
      for (const [path, body] of [
        ['/api/auth/signin', { email: admin.email, password: admin.password }],
        ['/api/auth/reset-password', { email: admin.email }],
      ] as const) {
        const answer = await call(base, 'POST', path, { body });
        expect(answer.status, `${path} ${JSON.stringify(answer.body)}`).toBe(500);
        expect(answer.body, path).toEqual({ success: false, error: 'Internal server error', statusCode: 500, requestId: expect.any(String) });
      }
    } finally {
      await sql.unsafe('drop trigger refuse_account_writes on auth.users; drop function public.refuse_account_writes()');
    }
    // The same account signs in once the database takes the write again.
    expect((await call(base, 'POST', '/api/auth/signin', { body: { email: admin.email, password: admin.password } })).status).toBe(200);
  });

  it('an account made by a request whose answer never came back in time, or came back as a gateway 502, is 503, not 409', { timeout: 20_000 }, async () => {
    // A gateway in front of the auth server: it passes each request on, then
    // holds the answer past our deadline, or replaces it with a 502.
    let mode: 'slow' | 'bad-gateway' = 'slow';
    const gateway = await startAuthGateway(auth!, async (_request, response, forward) => {
      const upstream = await forward();
      const text = await upstream.text();
      if (mode === 'bad-gateway') return void response.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway');
      setTimeout(() => response.writeHead(upstream.status, { 'content-type': 'application/json' }).end(text), 1_500);
    });
    const slowApp = await buildTestApp({ ...realAuthEnv({ ...auth!, url: gateway.url }), AUTH_TIMEOUT_MS: '500' });
    const slowBase = await slowApp.listen({ host: '127.0.0.1', port: 0 });
    try {
      for (const next of ['slow', 'bad-gateway'] as const) {
        mode = next;
        const email = uniqueEmail(`gateway-${next}`);
        const answer = await call(slowBase, 'POST', '/api/auth/signup', { body: { email, password: 'gateway-secret', name: 'Gateway Person' } });
        expect(answer.status, next).toBe(503);
        expect(answer.body, next).toMatchObject({ error: 'Authentication service unavailable' });
        // The auth server did make the account: the answer is unknown, not a duplicate.
        await expect.poll(async () => (await sql`select 1 from auth.users where email = ${email}`).length, { timeout: 5_000 }).toBe(1);
      }
    } finally {
      await slowApp.close();
      await gateway.close();
    }
  });
});
