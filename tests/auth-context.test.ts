import type { FastifyInstance } from 'fastify';
import { SignJWT, UnsecuredJWT } from 'jose';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, buildTestAppWithLog, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/app.ts';
import { createAuthUser, openSession } from './support/db.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// The auth context refuses every token it cannot trust before any handler
// runs. Guards are exercised on stand-in routes; feature modules test their
// own routes.

const encoder = new TextEncoder();

async function routes(app: FastifyInstance) {
  app.get('/t/admin', { onRequest: app.requireRole('admin') }, async (request) => ({ success: true, data: request.caller }));
  app.get('/t/viewer', { onRequest: app.requireRole('viewer', 'editor', 'admin') }, async () => ({ success: true }));
  app.get('/t/user', { onRequest: app.requireUser }, async () => ({ success: true }));
}

function supabaseToken(claims: Record<string, unknown>, secret = TEST_JWT_SECRET, expiresIn: string | number = '1h') {
  return new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: crypto.randomUUID(), ...claims })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(String(claims.sub ?? crypto.randomUUID()))
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .sign(encoder.encode(secret));
}

describe('auth context', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp({}, routes);
  });
  afterAll(async () => app.close());

  const get = (url: string, token?: string) =>
    app.inject({ method: 'GET', url, headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

  it('no token, garbage, or a non-Bearer scheme → 401 Authentication required', async () => {
    for (const response of [
      await get('/t/admin'),
      await get('/t/admin', 'not-a-jwt'),
      await get('/t/admin', 'a.b.c'),
      await app.inject({ method: 'GET', url: '/t/admin', headers: { authorization: 'Basic dXNlcjpwYXNz' } }),
    ]) {
      expect(response.statusCode).toBe(401);
      expect(response.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
    }
  });

  it('refuses forged Supabase tokens: wrong secret, alg none, expired, another audience', async () => {
    // The forged tokens name a live session, which the same claims signed as the auth server signs
    // them open: only the token's own checks can refuse them, not the session lookup after them.
    const database = await createPrivateDatabase('forged');
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    const ownApp = await buildTestApp({ DATABASE_URL: database.url }, routes);
    try {
      const user = await createAuthUser(sql);
      const claims = { sub: user.id, session_id: await openSession(sql, user.id) };
      const getOwn = (url: string, token: string) => ownApp.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } });
      expect((await getOwn('/t/user', await supabaseToken(claims))).statusCode).toBe(200);
      const forged = [
        await supabaseToken(claims, 'some-other-projects-secret-0123456789abcdef'),
        new UnsecuredJWT({ ...claims, role: 'authenticated', aud: 'authenticated' }).setExpirationTime('1h').encode(),
        await supabaseToken(claims, TEST_JWT_SECRET, Math.floor(Date.now() / 1000) - 3600),
        await supabaseToken({ ...claims, aud: 'another-project' }),
      ];
      for (const token of forged) {
        for (const url of ['/t/viewer', '/t/user']) {
          expect((await getOwn(url, token)).json(), url).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
        }
      }
    } finally {
      await ownApp.close();
      await sql.end();
      await database.drop();
    }
  });

  it('accepts the legacy admin token on admin routes only', async () => {
    const token = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops-user-1');
    const admin = await get('/t/admin', token);
    expect(admin.statusCode).toBe(200);
    expect(admin.json().data).toEqual({ kind: 'legacy-admin', userId: 'ops-user-1', roles: ['admin'] });
    expect((await get('/t/viewer', token)).statusCode).toBe(200);
    // It is not a user session.
    expect((await get('/t/user', token)).statusCode).toBe(401);
  });

  it('refuses legacy tokens with admin false, a wrong secret, or past their 24 h', async () => {
    const sign = (claims: Record<string, unknown>, secret = TEST_ADMIN_JWT_SECRET, exp: string | number = '24h') =>
      new SignJWT(claims).setProtectedHeader({ alg: 'HS256' }).setIssuedAt().setExpirationTime(exp).sign(encoder.encode(secret));
    const refused = [
      await sign({ admin: false, userId: 'u1' }),
      await sign({ admin: 'true', userId: 'u1' }),
      await sign({ admin: true }),
      await sign({ admin: true, userId: 'u1' }, 'not-the-admin-secret-0123456789abcdef'),
      await sign({ admin: true, userId: 'u1' }, TEST_ADMIN_JWT_SECRET, Math.floor(Date.now() / 1000) - 60),
      new UnsecuredJWT({ admin: true, userId: 'u1' }).setExpirationTime('1h').encode(),
    ];
    for (const token of refused) expect((await get('/t/admin', token)).statusCode).toBe(401);
  });
});

describe('an account deleted while its session is cached', () => {
  it("its own routes answer 401, not 404, so a front end sends the user to sign in; an admin asking for it still gets 404", async () => {
    const database = await createPrivateDatabase('deleted_account');
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    const ownApp = await buildTestApp({ DATABASE_URL: database.url });
    try {
      const user = await createAuthUser(sql);
      const token = await supabaseToken({ sub: user.id, session_id: await openSession(sql, user.id) });
      const as = (method: 'GET' | 'PUT', url: string, bearer = token) =>
        ownApp.inject({ method, url, headers: { authorization: `Bearer ${bearer}` }, ...(method === 'PUT' ? { payload: { name: 'Gone' } } : {}) });
      // Seen alive: for the next seconds the session is not asked again.
      expect((await as('GET', '/api/auth/me')).statusCode).toBe(200);
      await sql`delete from auth.users where id = ${user.id}`;
      for (const [method, url] of [
        ['GET', '/api/auth/me'],
        ['GET', '/api/users/me'],
        ['GET', `/api/users/${user.id}`],
        ['PUT', `/api/users/${user.id}`],
      ] as const) {
        const response = await as(method, url);
        expect([method, url, response.statusCode, response.json()]).toEqual([method, url, 401, { success: false, error: 'Authentication required', statusCode: 401 }]);
      }
      const admin = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops-admin');
      expect((await as('GET', `/api/users/${user.id}`, admin)).statusCode).toBe(404);
    } finally {
      await ownApp.close();
      await sql.end();
      await database.drop();
    }
  });
});

describe('the log line of a refused token', () => {
  it('says why it was refused, which the 401 does not', async () => {
    // A database of its own, as above: without Supabase Auth the stack's has no auth.sessions to look in.
    const database = await createPrivateDatabase('why');
    const sql = postgres(database.url, { max: 1, onnotice: () => {} });
    const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: database.url }, 'info', routes);
    try {
      const user = await createAuthUser(sql);
      const signedOut = { sub: user.id, session_id: await openSession(sql, user.id) };
      await sql`delete from auth.sessions where id = ${signedOut.session_id}`;
      const legacy = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops-user-2');
      const asked = [
        ['/t/user', await supabaseToken(signedOut), 'the session has ended'],
        ['/t/user', await supabaseToken({}, TEST_JWT_SECRET, Math.floor(Date.now() / 1000) - 3600), 'token refused: "exp" claim timestamp check failed'],
        ['/t/user', await supabaseToken({}, 'some-other-projects-secret-0123456789abcdef'), 'token refused: signature verification failed'],
        ['/t/user', legacy, 'a legacy admin token, on a route for signed-in users'],
      ] as const;
      for (const [index, [url, token]] of asked.entries()) {
        const answer = await app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}`, 'x-request-id': `why-${index}` } });
        expect(answer.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
      }
      const reasons = lines
        .map((line) => JSON.parse(line))
        .filter((entry) => entry.msg === 'request refused')
        .map((entry) => [entry.requestId, entry.reason]);
      expect(reasons).toEqual(asked.map(([, , reason], index) => [`why-${index}`, reason]));
    } finally {
      await app.close();
      await sql.end();
      await database.drop();
    }
  });
});

describe('auth context with the database unreachable', () => {
  it("a session that cannot be checked is 503 Database unavailable, in the envelope even on a route whose own 503 has another shape", async () => {
    // Nothing listens on port 1. /api/admin/health declares its own 503 body (the health report):
    // the guard's 503 was serialized through it, failed, and went out as a bare 500.
    const app = await buildTestApp({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' }, routes);
    try {
      const token = await supabaseToken({ email: 'admin@example.test' });
      for (const url of ['/api/admin/health', '/api/feedback/get-feedback', '/t/user']) {
        const response = await app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${token}` } });
        expect([response.statusCode, response.json()], url).toEqual([
          503,
          { success: false, error: 'Database unavailable', statusCode: 503, requestId: expect.any(String) },
        ]);
      }
    } finally {
      await app.close();
    }
  });
});

const SUPABASE_URL = 'http://127.0.0.1:54321';

/** An app that knows SUPABASE_URL's auth server, and the SUPABASE_JWT_SECRET warnings it logs. */
async function appWithSecretWarnings(overrides: Record<string, string> = {}) {
  const { buildTestAppWithLog } = await import('./support/app.ts');
  const { app, lines } = await buildTestAppWithLog({ SUPABASE_URL, SUPABASE_ANON_KEY: 'anon', ...overrides }, 'warn');
  const me = (token: string) => app.inject({ method: 'GET', url: '/api/auth/me', headers: { authorization: `Bearer ${token}` } });
  const entries = () => lines.map((line) => JSON.parse(line) as { level: number; msg: string });
  return { app, me, warnings: () => entries().filter((line) => line.msg.includes('SUPABASE_JWT_SECRET')) };
}

describe('a project JWT secret that is not the auth server’s', () => {
  it('refuses its tokens (401) and says in the log, at most once a minute, that SUPABASE_JWT_SECRET is probably wrong', async () => {
    const { app, me, warnings } = await appWithSecretWarnings();
    try {
      // Signed by the auth server with its own secret: not the one this API was given.
      const fromTheAuthServer = () => supabaseToken({ iss: `${SUPABASE_URL}/auth/v1` }, 'the-auth-servers-own-secret-0123456789abcdef');
      for (let i = 0; i < 3; i += 1) expect((await me(await fromTheAuthServer())).statusCode).toBe(401);
      expect(warnings()).toEqual([expect.objectContaining({ level: 40, msg: expect.stringMatching(/^a token of SUPABASE_URL's auth server failed its signature check: SUPABASE_JWT_SECRET is probably not that project's/) })]);
      // A forged token of another issuer, or none, is no such sign.
      await me(await supabaseToken({ iss: 'https://elsewhere.example/auth/v1' }, 'x'.repeat(40)));
      expect(warnings()).toHaveLength(1);
    } finally {
      await app.close();
    }
  });
});

describe('no project JWT secret, and an auth server that signs with one', () => {
  it('refuses its tokens (401) and says in the log, at most once a minute, that SUPABASE_JWT_SECRET is not set', async () => {
    const { app, me, warnings } = await appWithSecretWarnings({ SUPABASE_JWT_SECRET: '' });
    try {
      const fromTheAuthServer = () => supabaseToken({ iss: `${SUPABASE_URL}/auth/v1` });
      for (let i = 0; i < 3; i += 1) expect((await me(await fromTheAuthServer())).statusCode).toBe(401);
      expect(warnings()).toEqual([
        expect.objectContaining({
          level: 40,
          msg: "a token of SUPABASE_URL's auth server is signed with the project's JWT secret (HS256) and SUPABASE_JWT_SECRET is not set: its tokens are all refused (401)",
        }),
      ]);
      // A token naming another issuer says nothing about this project's settings.
      await me(await supabaseToken({ iss: 'https://elsewhere.example/auth/v1' }));
      expect(warnings()).toHaveLength(1);
    } finally {
      await app.close();
    }
  });
});

describe('a forged token naming our auth server as its issuer', () => {
  it('is no sign of a wrong SUPABASE_JWT_SECRET while tokens of ours verify with it: no warning an attacker can have written at will', async () => {
    // Anyone can sign a token with `iss` set to SUPABASE_URL's auth server and a key of their own.
    // With the right secret in place (a real token verified a moment ago), logging that the
    // secret is "probably not that project's" told the operator to change a working setting.
    const { app, me, warnings } = await appWithSecretWarnings();
    try {
      // A real user's token, signed with the secret the API has: it verifies (its session is unknown here, so it is refused all the same).
      await me(await supabaseToken({ iss: `${SUPABASE_URL}/auth/v1` }));
      const forged = await supabaseToken({ iss: `${SUPABASE_URL}/auth/v1` }, 'an-attackers-own-key-0123456789abcdef-0123');
      expect((await me(forged)).statusCode).toBe(401);
      expect(warnings()).toEqual([]);
    } finally {
      await app.close();
    }
  });
});
