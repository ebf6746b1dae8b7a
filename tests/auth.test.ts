import { type AddressInfo, createServer, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, buildTestAppWithLog, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/app.ts';
import { createAuthUser, testSql } from './support/db.ts';

// /api/auth as far as it can be shown without the auth server (which cannot
// be built here): every validation and authentication error the SPEC lists,
// the rate limits, and 503 when the auth server is unreachable. The flows
// that succeed need the real Supabase Auth.

const sql = testSql();
afterAll(() => sql.end());

// Nothing listens on port 1, so every call to the auth server is refused.
const UNREACHABLE_AUTH = {
  SUPABASE_URL: 'http://127.0.0.1:1',
  SUPABASE_ANON_KEY: 'anon-key',
  SUPABASE_SERVICE_ROLE_KEY: 'service-key',
  AUTH_TIMEOUT_MS: '1500',
};

const post = (app: FastifyInstance, url: string, payload: unknown, headers: Record<string, string> = {}) =>
  app.inject({ method: 'POST', url: `/api/auth${url}`, payload: payload as object, headers });

describe('/api/auth errors (SPEC section 7)', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp(UNREACHABLE_AUTH);
  });
  afterAll(async () => app.close());

  it('signup: invalid fields → 400 Validation failed with details per field', async () => {
    const response = await post(app, '/signup', { email: 'not-an-email', password: '123', name: 'A' });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({
      success: false,
      error: 'Validation failed',
      statusCode: 400,
      details: {
        email: ['Invalid email format'],
        password: ['Password must be at least 6 characters'],
        name: ['Name must be at least 2 characters'],
      },
    });
  });

  it('signup: an address the auth server would refuse is refused here first (a domain label over 63 characters or ending in -)', async () => {
    // Over 254 characters, well formed or not, up to what the body limit lets through: one message.
    const overlong = [`${'a'.repeat(60)}@${`${'b'.repeat(48)}.`.repeat(4)}com`, `${'a.'.repeat(500_000)}@`];
    for (const email of ['ab@a-.com', `ab@${'a'.repeat(64)}.com`, 'ab@-a.com', ...overlong]) {
      const response = await post(app, '/signup', { email, password: 'secret1', name: 'Tester' });
      expect(response.statusCode, email.slice(0, 80)).toBe(400);
      expect(response.json().details, email.slice(0, 80)).toEqual({ email: ['Invalid email format'] });
    }
    // The longest label the auth server takes passes the check (and then finds the auth server unreachable).
    const longest = await post(app, '/signup', { email: `ab@${'a'.repeat(63)}.com`, password: 'secret1', name: 'Tester' });
    expect(longest.statusCode).toBe(503);
  });

  it('answers with tokens, accounts, roles or feedback are never stored by a cache', async () => {
    for (const [method, url] of [
      ['POST', '/api/auth/signin'],
      ['POST', '/api/auth/refresh'],
      ['GET', '/api/auth/me'],
      ['GET', '/api/users/me'],
      ['GET', '/api/admin/users'],
      ['GET', '/api/admin/health'],
      ['GET', '/api/admin/logs'],
      ['GET', `/api/userRoles/${crypto.randomUUID()}`],
      ['GET', '/api/feedback/get-feedback'],
    ] as const) {
      const response = await app.inject({ method, url, ...(method === 'POST' ? { payload: {} } : {}) });
      expect(response.headers['cache-control'], url).toBe('no-store');
    }
    // Other data keeps its own rules (the tracker is cached for an hour).
    expect((await app.inject({ method: 'GET', url: '/script.js' })).headers['cache-control']).toBe('public, max-age=3600');
  });

  it('signup: missing fields are named', async () => {
    const response = await post(app, '/signup', {});
    expect(response.statusCode).toBe(400);
    expect(response.json().details).toEqual({
      email: ['Email is required'],
      password: ['Password is required'],
      name: ['Name is required'],
    });
  });

  it('signin: e-mail or password missing → 400 Email and password are required', async () => {
    for (const body of [{}, { email: 'a@example.test' }, { password: 'secret1' }, { email: '', password: '' }, { email: null, password: 'secret1' }, { email: '   ', password: 'secret1' }]) {
      const response = await post(app, '/signin', body);
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ success: false, error: 'Email and password are required', statusCode: 400 });
    }
  });

  it('sign in, reset and update-password: a field of the wrong type or too long is named in the project\'s words, not the validator\'s', async () => {
    for (const [url, body, field, message] of [
      ['/signin', { email: 'a@example.test', password: 123456 }, 'password', 'Password must be a string'],
      ['/signin', { email: ['a@example.test'], password: 'secret1' }, 'email', 'Email must be a string'],
      ['/signin', { email: `${'a'.repeat(250)}@x.io`, password: 'secret1' }, 'email', 'Email must be at most 254 characters'],
      ['/reset-password', { email: 42 }, 'email', 'Email must be a string'],
      ['/update-password', { token: 42, newPassword: 'secret123' }, 'token', 'Token must be a string'],
      ['/update-password', { token: 'abc', newPassword: { value: 'secret123' } }, 'newPassword', 'New password must be a string'],
    ] as const) {
      const response = await post(app, url, body);
      expect(response.statusCode, `${url} ${JSON.stringify(body)}`).toBe(400);
      expect(response.json(), `${url} ${JSON.stringify(body)}`).toEqual({ success: false, error: 'Validation failed', details: { [field]: [message] }, statusCode: 400 });
    }
  });

  it('a POST with no body, an empty JSON body or `null` is a request without fields, not malformed JSON', async () => {
    const json = { 'content-type': 'application/json' };
    for (const [url, error] of [
      ['/signin', 'Email and password are required'],
      ['/reset-password', 'Email is required'],
      ['/update-password', 'New password is required'],
    ]) {
      for (const request of [{}, { payload: '', headers: json }, { payload: '  ', headers: json }, { payload: 'null', headers: json }]) {
        const response = await app.inject({ method: 'POST', url: `/api/auth${url}`, ...request });
        expect(response.statusCode, `${url} ${JSON.stringify(request)}`).toBe(400);
        expect(response.json().error, `${url} ${JSON.stringify(request)}`).toBe(error);
      }
    }
    const signup = await app.inject({ method: 'POST', url: '/api/auth/signup', payload: '', headers: json });
    expect(signup.json().details).toEqual({ email: ['Email is required'], password: ['Password is required'], name: ['Name is required'] });
    // Still malformed: text that is not JSON.
    const malformed = await app.inject({ method: 'POST', url: '/api/auth/signin', payload: '{"email":', headers: json });
    expect(malformed.json()).toEqual({ success: false, error: 'Malformed JSON in request body', statusCode: 400 });
    // Sign out takes no body: a JSON content type without one is answered for the token alone.
    const signout = await app.inject({ method: 'POST', url: '/api/auth/signout', payload: '', headers: { ...json, authorization: 'Bearer garbage' } });
    expect(signout.json()).toEqual({ success: false, error: 'No active session', statusCode: 401 });
  });

  it('refresh: missing, empty or over-long refresh token → 400 naming what is wrong', async () => {
    for (const [body, message] of [
      [{}, 'Refresh token is required'],
      [{ refreshToken: '' }, 'Refresh token is required'],
      [{ refreshToken: 'r'.repeat(4097) }, 'Refresh token must be at most 4096 characters'],
      [{ refreshToken: 42 }, 'Refresh token must be a string'],
    ] as const) {
      const response = await post(app, '/refresh', body);
      expect(response.statusCode).toBe(400);
      expect(response.json()).toMatchObject({ error: 'Validation failed', details: { refreshToken: [message] } });
    }
  });

  it('reset-password: missing → 400 Email is required; unknown → 404', async () => {
    const missing = await post(app, '/reset-password', {});
    expect(missing.statusCode).toBe(400);
    expect(missing.json()).toEqual({ success: false, error: 'Email is required', statusCode: 400 });
    const malformed = await post(app, '/reset-password', { email: 'nope' });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().details).toEqual({ email: ['Invalid email format'] });
    const unknown = await post(app, '/reset-password', { email: 'nobody-here@example.test' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toEqual({ success: false, error: 'No user found with this email', statusCode: 404 });
  });

  it('update-password: short password and missing token', async () => {
    const short = await post(app, '/update-password', { token: 'abc', newPassword: '12345' });
    expect(short.statusCode).toBe(400);
    expect(short.json().error).toBe('Password must be at least 6 characters');
    const noToken = await post(app, '/update-password', { newPassword: 'long-enough' });
    expect(noToken.statusCode).toBe(400);
    expect(noToken.json().error).toBe('Invalid or expired reset token');
    // Over bcrypt's 72 bytes (here 75 in 25 characters): refused here, before the auth server is asked.
    const long = await post(app, '/update-password', { token: 'abc', newPassword: '€'.repeat(25) });
    expect(long.statusCode).toBe(400);
    expect(long.json()).toMatchObject({ error: 'Password must be at most 72 bytes', details: { newPassword: ['Password must be at most 72 bytes'] } });
  });

  it('me and link: no or invalid token → 401 Authentication required', async () => {
    const forged = await new SignJWT({ aud: 'authenticated', role: 'authenticated', session_id: crypto.randomUUID() })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject(crypto.randomUUID())
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode('wrong-secret-wrong-secret-wrong-secret'));
    for (const headers of [{}, { authorization: 'Bearer garbage' }, { authorization: `Bearer ${forged}` }] as Record<string, string>[]) {
      const me = await app.inject({ method: 'GET', url: '/api/auth/me', headers });
      expect(me.statusCode).toBe(401);
      expect(me.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
      const link = await post(app, '/link', { provider: 'keycloak', token: 'x' }, headers);
      expect(link.statusCode).toBe(401);
    }
  });

  it('signout: no token, a forged token, or the legacy admin token → 401 No active session', async () => {
    const legacy = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops');
    for (const headers of [{}, { authorization: 'Bearer garbage' }, { authorization: `Bearer ${legacy}` }] as Record<string, string>[]) {
      const response = await post(app, '/signout', undefined, headers);
      expect(response.statusCode).toBe(401);
      expect(response.json()).toEqual({ success: false, error: 'No active session', statusCode: 401 });
    }
  });

  it('a well-signed token whose session cannot be checked is not let through', async () => {
    // The session table belongs to the auth server; without it the check
    // cannot answer, and the request is refused with 503, never admitted.
    const token = await new SignJWT({ aud: 'authenticated', role: 'authenticated', session_id: crypto.randomUUID() })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject(crypto.randomUUID())
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(TEST_JWT_SECRET));
    const response = await app.inject({ method: 'GET', url: '/api/auth/me', headers: { authorization: `Bearer ${token}` } });
    expect([401, 503]).toContain(response.statusCode);
    expect(response.json().success).toBe(false);
  });
});

describe('/api/auth with the auth server unreachable', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp(UNREACHABLE_AUTH);
  });
  afterAll(async () => app.close());

  it('sign up, sign in, refresh and reset answer 503 Authentication service unavailable', async () => {
    const known = await createAuthUser(sql);
    const calls = [
      post(app, '/signup', { email: 'new-user@example.test', password: 'secret123', name: 'New User' }),
      post(app, '/signin', { email: 'someone@example.test', password: 'secret123' }),
      post(app, '/refresh', { refreshToken: 'some-refresh-token' }),
      post(app, '/reset-password', { email: known.email }),
      post(app, '/update-password', { token: 'some-token-hash', newPassword: 'secret123' }),
    ];
    for (const response of await Promise.all(calls)) {
      expect(response.statusCode).toBe(503);
      expect(response.json()).toEqual({
        success: false,
        error: 'Authentication service unavailable',
        statusCode: 503,
        requestId: expect.any(String),
      });
    }
  });

  it("logs why: the auth server's own failure is the 503's cause, with the route and status", async () => {
    const { app: logged, lines } = await buildTestAppWithLog(UNREACHABLE_AUTH);
    try {
      const response = await logged.inject({
        method: 'POST',
        url: '/api/auth/signin',
        payload: { email: 'someone@example.test', password: 'secret123' },
        headers: { 'x-request-id': 'auth-down-1' },
      });
      expect(response.statusCode).toBe(503);
      const [failed] = lines.map((line) => JSON.parse(line)).filter((entry) => entry.requestId === 'auth-down-1' && entry.level === 50);
      expect(failed).toMatchObject({ msg: 'request failed', method: 'POST', route: '/api/auth/signin', statusCode: 503 });
      // Ours, then the auth client's (a refused connection here), message and stack alike.
      expect(failed.err.message).toMatch(/^Authentication service unavailable: \S/);
      expect(failed.err.stack).toContain('caused by: ');
      expect(response.json()).toEqual({ success: false, error: 'Authentication service unavailable', statusCode: 503, requestId: 'auth-down-1' });
    } finally {
      await logged.close();
    }
  });

  it('logs a deadline of ours as the cause when the auth server takes the connection and never answers', async () => {
    const held = new Set<Socket>();
    const silent = createServer((socket) => held.add(socket.on('error', () => {})));
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as AddressInfo;
    const { app: logged, lines } = await buildTestAppWithLog({ ...UNREACHABLE_AUTH, SUPABASE_URL: `http://127.0.0.1:${port}`, AUTH_TIMEOUT_MS: '300' });
    try {
      const response = await logged.inject({ method: 'POST', url: '/api/auth/refresh', payload: { refreshToken: 'some-refresh-token' }, headers: { 'x-request-id': 'auth-silent-1' } });
      expect(response.statusCode).toBe(503);
      const [failed] = lines.map((line) => JSON.parse(line)).filter((entry) => entry.requestId === 'auth-silent-1' && entry.level === 50);
      expect(failed.err.message).toBe('Authentication service unavailable: no answer from the auth server within 300 ms');
    } finally {
      await logged.close();
      for (const socket of held) socket.destroy();
      await new Promise((resolve) => silent.close(resolve));
    }
  });

  it('answers 503 too when no auth server is configured at all', async () => {
    const unconfigured = await buildTestApp({});
    try {
      const response = await post(unconfigured, '/signin', { email: 'someone@example.test', password: 'secret123' });
      expect(response.statusCode).toBe(503);
      expect(response.json().error).toBe('Authentication service unavailable');
    } finally {
      await unconfigured.close();
    }
  });
});

describe('/api/auth rate limits (SPEC section 8)', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp({ ...UNREACHABLE_AUTH, RATE_LIMIT_AUTH_PER_MIN: '10', RATE_LIMIT_RESET_PER_MIN: '5', RATE_LIMIT_ACCOUNT_PER_MIN: '10' });
  });
  afterAll(async () => app.close());

  it('signup and signin share 10 per minute per IP; the 11th is 429', async () => {
    const ip = '198.51.100.7';
    for (let i = 0; i < 10; i += 1) {
      const url = i % 2 ? '/api/auth/signin' : '/api/auth/signup';
      const response = await app.inject({ method: 'POST', url, payload: {}, remoteAddress: ip });
      expect(response.statusCode).toBe(400);
    }
    const refused = await app.inject({ method: 'POST', url: '/api/auth/signin', payload: {}, remoteAddress: ip });
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toEqual({
      success: false,
      error: 'Too many requests. Please try again later.',
      statusCode: 429,
      retryAfter: expect.any(Number),
    });
  });

  it('reset-password allows 5 per minute per IP', async () => {
    const ip = '198.51.100.8';
    for (let i = 0; i < 5; i += 1) {
      const response = await app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: {}, remoteAddress: ip });
      expect(response.statusCode).toBe(400);
    }
    const refused = await app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: {}, remoteAddress: ip });
    expect(refused.statusCode).toBe(429);
  });

  it('the other auth routes (refresh, sign out, update password, me, link) share 10 per minute per IP, apart from sign in', async () => {
    const ip = '198.51.100.9';
    const routes = [
      { method: 'POST', url: '/api/auth/refresh', payload: {} },
      { method: 'POST', url: '/api/auth/signout' },
      { method: 'POST', url: '/api/auth/update-password', payload: {} },
      { method: 'GET', url: '/api/auth/me' },
      { method: 'POST', url: '/api/auth/link', payload: {} },
    ] as const;
    for (let i = 0; i < 10; i += 1) {
      const response = await app.inject({ ...routes[i % routes.length], remoteAddress: ip });
      expect(response.statusCode, `${routes[i % routes.length].url}`).not.toBe(429);
    }
    for (const route of routes) {
      const refused = await app.inject({ ...route, remoteAddress: ip });
      expect(refused.statusCode, route.url).toBe(429);
      expect(refused.json().error).toBe('Too many requests. Please try again later.');
    }
    // Sign in keeps its own budget.
    expect((await app.inject({ method: 'POST', url: '/api/auth/signin', payload: {}, remoteAddress: ip })).statusCode).toBe(400);
  });
});
