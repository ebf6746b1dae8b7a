import { createHash, randomBytes, randomInt } from 'node:crypto';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { decodeJwt, decodeProtectedHeader, SignJWT } from 'jose';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SESSION_COOKIE } from '../src/modules/admin/status/routes.ts';
import { buildTestApp } from './support/app.ts';
import { expectRunning, type ServerProcess, startServerProcess } from './support/fault-traffic.ts';
import { uniqueEmail } from './support/db.ts';
import { call, type HttpAnswer, idTokenFor, linkIn, messagesTo, realAuth, realAuthEnv, resetTokenIn, signUp, startAuthGateway } from './support/real-auth.ts';
import { TEST_JWT_SECRET } from './support/secrets.ts';

// Every /api/auth route of SPEC section 4 and every error of section 7,
// against the real Supabase Auth server of this run's stack, over HTTP to a
// real `node src/server.ts` process. At the end the process must still be
// serving and must have logged no unhandled rejection.

const auth = realAuth();
const ISO_MILLIS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;

describe.runIf(auth)('accounts against the real Supabase Auth server', () => {
  let server: ServerProcess;
  let sql: postgres.Sql;
  let base: string;
  const post = (path: string, body?: unknown, token?: string) => call(base, 'POST', path, { body, token });
  const me = (token: string) => call(base, 'GET', '/api/auth/me', { token });

  // Shared with a second instance by the double-click test.
  const redisPrefix = `auth-flows-${randomBytes(6).toString('hex')}:`;
  const serverEnv = () => ({
    ...realAuthEnv(auth!),
    RATE_LIMIT_AUTH_PER_MIN: '1000',
    RATE_LIMIT_RESET_PER_MIN: '1000',
    REDIS_URL: 'redis://127.0.0.1:6379',
    RATE_LIMIT_REDIS_PREFIX: redisPrefix,
  });

  beforeAll(async () => {
    server = await startServerProcess(inject('stack').databaseUrl, serverEnv());
    base = server.baseUrl;
    sql = postgres(inject('stack').databaseUrl, { max: 2, onnotice: () => {} });
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
    await sql?.end();
  });

  /**
   * The auth server's own token as it reads `secondsAgo` past its expiry: the
   * same header and claims, signed with `key` (the stack's JWT secret).
   */
  const expiredCopy = async (accessToken: string, key = TEST_JWT_SECRET, secondsAgo = 60) => {
    const now = Math.floor(Date.now() / 1000);
    const header = decodeProtectedHeader(accessToken);
    return new SignJWT({ ...decodeJwt(accessToken), iat: now - 3600 - secondsAgo, exp: now - secondsAgo })
      .setProtectedHeader({ ...header, alg: header.alg! })
      .sign(new TextEncoder().encode(key));
  };

  /**
   * A client at an address of its own. The auth server allows each address a
   * burst of 30 sign-ups and sign-ins, and the tests of this file spend most of
   * CLIENT_ADDRESS's: the race tests, many of each, act from their own.
   */
  const clientAt = (address: string) => {
    const send = async (url: string, path: string, body: unknown, token?: string): Promise<HttpAnswer> => {
      const headers: Record<string, string> = { 'x-forwarded-for': address, 'content-type': 'application/json' };
      if (token) headers.authorization = `Bearer ${token}`;
      const response = await fetch(`${url}${path}`, { method: 'POST', headers, body: JSON.stringify(body) });
      return { status: response.status, body: await response.json(), headers: response.headers };
    };
    const signUpAs = async (label: string) => {
      const email = uniqueEmail(label);
      const answer = await send(base, '/api/auth/signup', { email, password: `pw-${randomBytes(6).toString('hex')}`, name: 'Race Tester' });
      expect(answer.status).toBe(201);
      return { id: answer.body.data.user.id as string, email, accessToken: answer.body.data.session.accessToken as string };
    };
    return { send, signUp: signUpAs };
  };
  const anotherAddress = () => `10.${randomInt(256)}.${randomInt(256)}.${1 + randomInt(254)}`;

  it('sign up: 201 with the user and a session; the profile row is made by the trigger', async () => {
    const email = uniqueEmail('signup');
    const answer = await post('/api/auth/signup', { email, password: 'secret1', name: 'Ada Lovelace' });
    expect(answer.status).toBe(201);
    expect(answer.body).toMatchObject({ success: true, message: expect.any(String) });
    const { user, session } = answer.body.data;
    expect(user).toEqual({ id: expect.any(String), email, name: 'Ada Lovelace', createdAt: expect.stringMatching(ISO_MILLIS) });
    expect(session).toEqual({ accessToken: expect.any(String), refreshToken: expect.any(String), expiresIn: 3600, tokenType: 'bearer' });
    const [profile] = await sql`select email, name, created_at from public.profiles where id = ${user.id}`;
    expect(profile).toMatchObject({ email, name: 'Ada Lovelace' });
    expect(profile.created_at.toISOString()).toBe(user.createdAt);
  });

  it('sign up with a registered e-mail (in any case) is 409; bad fields are 400 with details', async () => {
    const account = await signUp(base, 'duplicate');
    for (const email of [account.email, account.email.toUpperCase()]) {
      const answer = await post('/api/auth/signup', { email, password: 'secret1', name: 'Someone Else' });
      expect(answer.status).toBe(409);
      expect(answer.body).toEqual({ success: false, error: 'User with this email already exists', statusCode: 409 });
    }
    const invalid = await post('/api/auth/signup', { email: 'nope', password: '123', name: 'A' });
    expect(invalid.status).toBe(400);
    expect(invalid.body.error).toBe('Validation failed');
    expect(invalid.body.details.email).toContain('Invalid email format');
    expect(invalid.body.details.password).toContain('Password must be at least 6 characters');
    // An address zod's pattern takes and the auth server refuses (a label ending in -) was a 500.
    const refusedByAuth = await post('/api/auth/signup', { email: `${uniqueEmail('label').split('@')[0]}@a-.example.test`, password: 'secret1', name: 'Tester' });
    expect(refusedByAuth.status).toBe(400);
    expect(refusedByAuth.body).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { email: ['Invalid email format'] } });
  });

  it('sign in: 200 with lastLogin; a wrong password or an unknown e-mail is 401; missing fields 400', async () => {
    const account = await signUp(base, 'signin', 'Grace Hopper');
    const answer = await post('/api/auth/signin', { email: account.email, password: account.password });
    expect(answer.status).toBe(200);
    expect(answer.body.data.user).toEqual({ id: account.id, email: account.email, name: 'Grace Hopper', lastLogin: expect.stringMatching(ISO_MILLIS) });
    expect(Date.now() - Date.parse(answer.body.data.user.lastLogin)).toBeLessThan(60_000);
    expect(answer.body.data.session).toMatchObject({ expiresIn: 3600, tokenType: 'bearer' });

    for (const body of [
      { email: account.email, password: 'wrong-password' },
      { email: uniqueEmail('nobody'), password: 'secret1' },
    ]) {
      const refused = await post('/api/auth/signin', body);
      expect(refused.status).toBe(401);
      expect(refused.body).toEqual({ success: false, error: 'Invalid email or password', statusCode: 401 });
    }
    const missing = await post('/api/auth/signin', { email: account.email });
    expect(missing.status).toBe(400);
    expect(missing.body.error).toBe('Email and password are required');

    // The name is the profile's, as /me and PUT /api/users/:id have it, not the one signed up with.
    await sql`update public.profiles set name = 'Grace Brewster Hopper' where id = ${account.id}`;
    const renamed = await post('/api/auth/signin', { email: account.email, password: account.password });
    expect(renamed.body.data.user.name).toBe('Grace Brewster Hopper');
  });

  it('me: the profile with createdAt, lastLogin and roles; 401 without a valid token', async () => {
    const account = await signUp(base, 'me', 'Alan Turing');
    await post('/api/auth/signin', { email: account.email, password: account.password });
    const answer = await me(account.accessToken);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({
      success: true,
      data: {
        id: account.id,
        email: account.email,
        name: 'Alan Turing',
        createdAt: expect.stringMatching(ISO_MILLIS),
        lastLogin: expect.stringMatching(ISO_MILLIS),
        roles: ['user'],
      },
    });
    const refused = await call(base, 'GET', '/api/auth/me');
    expect(refused.status).toBe(401);
    expect(refused.body).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
  });

  it('refresh rotates the tokens; an older refresh token used again is refused, and the whole session ends at once', { timeout: 40_000 }, async () => {
    const account = await signUp(base, 'refresh');
    const first = await post('/api/auth/refresh', { refreshToken: account.refreshToken });
    expect(first.status).toBe(200);
    expect(first.body.data.session).toMatchObject({ expiresIn: 3600, tokenType: 'bearer' });
    const second = await post('/api/auth/refresh', { refreshToken: first.body.data.session.refreshToken });
    expect(second.status).toBe(200);
    const generations = [account.refreshToken, first.body.data.session.refreshToken, second.body.data.session.refreshToken];
    expect(new Set(generations).size).toBe(3);
    expect((await me(second.body.data.session.accessToken)).status).toBe(200);

    // supabase/config.toml allows reuse within refresh_token_reuse_interval (10 s), for
    // clients racing themselves. After it, the auth server still answers the parent of
    // the active token with the active token (a client that lost the answer), but an
    // older one means theft: refused, and the session ends.
    await new Promise((resolve) => setTimeout(resolve, 11_000));
    const parent = await post('/api/auth/refresh', { refreshToken: generations[1] });
    expect(parent.status).toBe(200);
    expect(parent.body.data.session.refreshToken).toBe(generations[2]);

    const [{ session_id: sessionId }] = await sql`select session_id from auth.refresh_tokens where token = ${generations[2]}`;
    const stolen = await post('/api/auth/refresh', { refreshToken: generations[0] });
    expect(stolen.status).toBe(401);
    expect(stolen.body).toEqual({ success: false, error: 'Invalid or expired refresh token', statusCode: 401 });
    // The session ends at once. The auth server alone only revokes its refresh tokens,
    // and honours each for the reuse interval after that: the newest, refreshed within
    // it, gave a new token that lived on. Now it is refused, and so is every access token.
    const newest = await post('/api/auth/refresh', { refreshToken: generations[2] });
    expect(newest.status).toBe(401);
    expect(newest.body).toEqual({ success: false, error: 'Invalid or expired refresh token', statusCode: 401 });
    expect((await me(second.body.data.session.accessToken)).status).toBe(401);
    const left = await sql`
      select (select count(*)::int from auth.sessions where id = ${sessionId}) as sessions,
             (select count(*)::int from auth.refresh_tokens where session_id = ${sessionId}) as tokens`;
    expect(left[0]).toEqual({ sessions: 0, tokens: 0 });
    // Ended as /logout ends one: its audit entry is there for the dashboard's history.
    const logouts = await sql`select 1 from auth.audit_log_entries where payload->>'actor_id' = ${account.id} and payload->>'action' = 'logout'`;
    expect(logouts).toHaveLength(1);
  });

  it('a refresh token unused for 30 days is refused; one unused for 29 days still works', async () => {
    const idle = await signUp(base, 'idle-31');
    const recent = await signUp(base, 'idle-29');
    // Back-date each session and its refresh token, as if that long had passed since the last refresh.
    const age = async (userId: string, days: number) => {
      const sessions = await sql`
        update auth.sessions set created_at = now() - make_interval(days => ${days}), updated_at = now() - make_interval(days => ${days}),
               refreshed_at = null
         where user_id = ${userId} returning id`;
      expect(sessions.length).toBe(1);
      await sql`
        update auth.refresh_tokens set created_at = now() - make_interval(days => ${days}), updated_at = now() - make_interval(days => ${days})
         where user_id = ${userId}`;
    };
    await age(idle.id, 31);
    await age(recent.id, 29);
    const refused = await post('/api/auth/refresh', { refreshToken: idle.refreshToken });
    expect(refused.status).toBe(401);
    expect(refused.body).toEqual({ success: false, error: 'Invalid or expired refresh token', statusCode: 401 });
    const refreshed = await post('/api/auth/refresh', { refreshToken: recent.refreshToken });
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.data.session.refreshToken).not.toBe(recent.refreshToken);
  });

  it('sign out: the access token is refused at once, its refresh token too; a second sign-out is "No active session"', async () => {
    const account = await signUp(base, 'signout');
    expect((await me(account.accessToken)).status).toBe(200);
    // As many HTTP clients send it: a JSON content type and no body.
    const response = await fetch(`${base}/api/auth/signout`, {
      method: 'POST',
      headers: { authorization: `Bearer ${account.accessToken}`, 'content-type': 'application/json' },
    });
    const answer = { status: response.status, body: await response.json() };
    expect(answer.status).toBe(200);
    expect(answer.body).toMatchObject({ success: true, message: expect.any(String) });

    expect((await me(account.accessToken)).status).toBe(401);
    expect((await post('/api/auth/refresh', { refreshToken: account.refreshToken })).status).toBe(401);
    const again = await post('/api/auth/signout', undefined, account.accessToken);
    expect(again.status).toBe(401);
    expect(again.body).toEqual({ success: false, error: 'No active session', statusCode: 401 });
    expect((await post('/api/auth/signout')).body.error).toBe('No active session');
  });

  it("sign out with an access token that has expired ends its session, with the auth server's audit entry: its refresh token is refused; a forged one ends nothing", async () => {
    const account = await signUp(base, 'signout-expired');
    const expired = await expiredCopy(account.accessToken);
    expect((await me(expired)).status).toBe(401);
    const answer = await post('/api/auth/signout', undefined, expired);
    expect(answer.status).toBe(200);
    expect(answer.body).toEqual({ success: true, message: 'Signed out successfully' });
    expect((await post('/api/auth/refresh', { refreshToken: account.refreshToken })).status).toBe(401);
    expect((await me(account.accessToken)).status).toBe(401);
    const again = await post('/api/auth/signout', undefined, expired);
    expect(again.body).toEqual({ success: false, error: 'No active session', statusCode: 401 });

    // The audit log has the entry the auth server's own /logout writes, once: the same columns and
    // payload as for an account signed out the ordinary way, but for this account.
    const reference = await signUp(base, 'signout-reference');
    expect((await post('/api/auth/signout', undefined, reference.accessToken)).status).toBe(200);
    const logouts = (userId: string) =>
      sql`select instance_id, ip_address, payload from auth.audit_log_entries
          where payload->>'actor_id' = ${userId} and payload->>'action' = 'logout'`;
    const [theirs] = await logouts(reference.id);
    expect(theirs.payload).toMatchObject({ action: 'logout', actor_id: reference.id, actor_username: reference.email });
    expect(await logouts(account.id)).toEqual([
      { ...theirs, payload: { ...theirs.payload, actor_id: account.id, actor_username: account.email } },
    ]);

    // Expired a second ago: the API still takes it (5 s of clock skew), the auth server's /logout
    // does not; the session is ended all the same, not left alive behind a 401.
    const justExpired = await signUp(base, 'signout-just-expired');
    const answered = await post('/api/auth/signout', undefined, await expiredCopy(justExpired.accessToken, TEST_JWT_SECRET, 1));
    expect(answered.body).toEqual({ success: true, message: 'Signed out successfully' });
    expect((await post('/api/auth/refresh', { refreshToken: justExpired.refreshToken })).status).toBe(401);

    // Signed with another key, the same expired token ends nothing: that session goes on.
    const other = await signUp(base, 'signout-forged');
    const forged = await post('/api/auth/signout', undefined, await expiredCopy(other.accessToken, `${TEST_JWT_SECRET}-not`));
    expect(forged.body).toEqual({ success: false, error: 'No active session', statusCode: 401 });
    expect(await logouts(other.id)).toEqual([]);
    expect((await me(other.accessToken)).status).toBe(200);
    expect((await post('/api/auth/refresh', { refreshToken: other.refreshToken })).status).toBe(200);
  });

  it('a session signed out on one instance is refused by another within its 5 s session-check cache', { timeout: 20_000 }, async () => {
    const other: FastifyInstance = await buildTestApp(realAuthEnv(auth!));
    try {
      const account = await signUp(base, 'two-instances');
      const meOnOther = () => other.inject({ method: 'GET', url: '/api/auth/me', headers: { authorization: `Bearer ${account.accessToken}` } });
      expect((await meOnOther()).statusCode).toBe(200); // now cached as alive on the other instance
      expect((await post('/api/auth/signout', undefined, account.accessToken)).status).toBe(200);
      const signedOutAt = Date.now();
      await expect.poll(async () => (await meOnOther()).statusCode, { timeout: 7_000, interval: 250 }).toBe(401);
      expect(Date.now() - signedOutAt).toBeLessThan(6_500);
    } finally {
      await other.close();
    }
  });

  it('reset: the e-mail reaches the sink, its token sets a new password once, the old password is refused and every session ends', { timeout: 30_000 }, async () => {
    const account = await signUp(base, 'reset');
    const unknown = await post('/api/auth/reset-password', { email: uniqueEmail('unknown') });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ success: false, error: 'No user found with this email', statusCode: 404 });
    expect((await post('/api/auth/reset-password', {})).body.error).toBe('Email is required');

    // Seen open: this instance trusts the session for its next seconds.
    expect((await me(account.accessToken)).status).toBe(200);
    const asked = await post('/api/auth/reset-password', { email: account.email });
    expect(asked.status).toBe(200);
    expect(asked.body).toMatchObject({ success: true, message: expect.any(String) });
    await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
    const [mail] = await messagesTo(account.email);
    expect(mail.subject).toBe('Reset your password');
    expect(linkIn(mail)).toMatch(/^http:\/\/localhost:5173\/reset-password\?token=[0-9a-f]+$/);
    const token = resetTokenIn(mail);

    const short = await post('/api/auth/update-password', { token, newPassword: '12345' });
    expect(short.status).toBe(400);
    expect(short.body.error).toBe('Password must be at least 6 characters');
    // Longer than bcrypt reads: refused before the token is redeemed, so the token still works below.
    const long = await post('/api/auth/update-password', { token, newPassword: 'x'.repeat(100) });
    expect(long.status).toBe(400);
    expect(long.body).toEqual({
      success: false,
      error: 'Password must be at most 72 bytes',
      statusCode: 400,
      details: { newPassword: ['Password must be at most 72 bytes'] },
    });
    expect((await post('/api/auth/update-password', { token: 'not-a-token', newPassword: 'another-secret' })).body).toEqual({
      success: false,
      error: 'Invalid or expired reset token',
      statusCode: 400,
    });

    const updated = await post('/api/auth/update-password', { token, newPassword: 'brand-new-secret' });
    expect(updated.status).toBe(200);
    expect(updated.body).toMatchObject({ success: true, message: expect.any(String) });
    expect((await post('/api/auth/signin', { email: account.email, password: account.password })).status).toBe(401);
    expect((await post('/api/auth/signin', { email: account.email, password: 'brand-new-secret' })).status).toBe(200);
    // Every session that existed before the reset has ended, at once: none is trusted from the cache.
    expect((await me(account.accessToken)).status).toBe(401);
    expect((await post('/api/auth/refresh', { refreshToken: account.refreshToken })).status).toBe(401);
    // The token works once.
    expect((await post('/api/auth/update-password', { token, newPassword: 'third-secret' })).status).toBe(400);
  });

  it('a reset link works for the hour its e-mail promises: one sent 65 minutes ago is refused, one sent 50 minutes ago still works', { timeout: 30_000 }, async () => {
    // The auth server's default is a day; supabase/config.toml's [auth.email] otp_expiry makes it 3600 s.
    const resetTokenOf = async (label: string) => {
      const account = await signUp(base, label);
      expect((await post('/api/auth/reset-password', { email: account.email })).status).toBe(200);
      await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
      return { account, token: resetTokenIn((await messagesTo(account.email))[0]) };
    };
    // The auth server times a recovery token hash by auth.users.recovery_sent_at (verify.go,
    // verifyTokenHash); the one-time token row's created_at is aged too, as if that long had passed.
    const age = async (userId: string, minutes: number) => {
      const users = await sql`
        update auth.users set recovery_sent_at = recovery_sent_at - make_interval(mins => ${minutes}) where id = ${userId} returning id`;
      expect(users).toHaveLength(1);
      const tokens = await sql`
        update auth.one_time_tokens set created_at = created_at - make_interval(mins => ${minutes})
         where user_id = ${userId} and token_type = 'recovery_token' returning id`;
      expect(tokens).toHaveLength(1);
    };
    const stale = await resetTokenOf('reset-stale');
    const fresh = await resetTokenOf('reset-fresh');
    await age(stale.account.id, 65);
    await age(fresh.account.id, 50);

    const refused = await post('/api/auth/update-password', { token: stale.token, newPassword: 'too-late-secret' });
    expect(refused.status).toBe(400);
    expect(refused.body).toEqual({ success: false, error: 'Invalid or expired reset token', statusCode: 400 });
    expect((await post('/api/auth/signin', { email: stale.account.email, password: stale.account.password })).status).toBe(200);

    const updated = await post('/api/auth/update-password', { token: fresh.token, newPassword: 'in-time-secret' });
    expect(updated.status).toBe(200);
    expect((await post('/api/auth/signin', { email: fresh.account.email, password: 'in-time-secret' })).status).toBe(200);
  });

  it('update-password whose last step, the auth server ending every session, fails: the sessions are ended in the database, with its audit entry', { timeout: 30_000 }, async () => {
    // A gateway in front of the auth server that passes everything on but
    // answers its /logout with a 502, after the password has changed.
    const refusedLogouts: string[] = [];
    const gateway = await startAuthGateway(auth!, async (request, response, forward) => {
      if (request.url?.startsWith('/auth/v1/logout')) {
        refusedLogouts.push(request.url);
        return void response.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway');
      }
      const upstream = await forward();
      response.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' }).end(await upstream.text());
    });
    const behindGateway = await buildTestApp(realAuthEnv({ ...auth!, url: gateway.url }));
    try {
      const account = await signUp(base, 'reset-logout-fails');
      const second = await post('/api/auth/signin', { email: account.email, password: account.password });
      expect(second.status).toBe(200);
      expect((await post('/api/auth/reset-password', { email: account.email })).status).toBe(200);
      await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
      const [mail] = await messagesTo(account.email);
      const token = resetTokenIn(mail);

      const updated = await behindGateway.inject({ method: 'POST', url: '/api/auth/update-password', payload: { token, newPassword: 'gateway-new-secret' } });
      expect(updated.statusCode).toBe(200);
      expect(refusedLogouts).toEqual(['/auth/v1/logout?scope=global']);
      // The two sessions from before the reset ended with the password change; the one the reset
      // token opened, which the auth server would have ended at /logout, has ended too.
      for (const refreshToken of [account.refreshToken, second.body.data.session.refreshToken]) {
        expect((await post('/api/auth/refresh', { refreshToken })).status).toBe(401);
      }
      expect(await sql`select id from auth.sessions where user_id = ${account.id}`).toEqual([]);
      const logouts = await sql`select payload from auth.audit_log_entries where payload->>'actor_id' = ${account.id} and payload->>'action' = 'logout'`;
      expect(logouts.map((entry) => entry.payload)).toEqual([
        { action: 'logout', actor_id: account.id, actor_username: account.email, actor_via_sso: false, log_type: 'account' },
      ]);
      expect((await post('/api/auth/signin', { email: account.email, password: 'gateway-new-secret' })).status).toBe(200);
    } finally {
      await behindGateway.close();
      await gateway.close();
    }
  });

  it('reset asked for at once (a double click, reaching two instances): one e-mail is sent, the other requests are 429, and the link that came works', { timeout: 40_000 }, async () => {
    const account = await signUp(base, 'reset-twice');
    // The auth server's one-e-mail-a-minute check races itself: each request
    // sent its own e-mail, each making the one before it void, so the first
    // link the user opened answered `Invalid or expired reset token`. The
    // address is held in the Redis the two instances share.
    const other = await startServerProcess(inject('stack').databaseUrl, serverEnv());
    let answers: Awaited<ReturnType<typeof post>>[];
    try {
      answers = await Promise.all(
        [base, other.baseUrl, base, other.baseUrl].map((url) => call(url, 'POST', '/api/auth/reset-password', { body: { email: account.email } })),
      );
      expectRunning(other);
    } finally {
      await other.stop();
    }
    expect(answers.map((answer) => answer.status).sort()).toEqual([200, 429, 429, 429]);
    for (const refused of answers.filter((answer) => answer.status === 429)) {
      expect(refused.body).toEqual({ success: false, error: 'Too many requests. Please try again later.', statusCode: 429, retryAfter: 60 });
    }
    await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const mails = await messagesTo(account.email);
    expect(mails).toHaveLength(1);
    const token = resetTokenIn(mails[0]);
    expect((await post('/api/auth/update-password', { token, newPassword: 'after-double-click' })).status).toBe(200);
  });

  it('one reset token sent twice at once (a double submit, or two instances) with different passwords: one 200, the other a used token, and the password answered 200 is the one set', { timeout: 60_000 }, async () => {
    // The auth server's verify step does not lock the token: both were 200,
    // each setting its own password, and only the one set last worked.
    const client = clientAt(anotherAddress());
    const other = await startServerProcess(inject('stack').databaseUrl, serverEnv());
    const passwordIs = async (userId: string, password: string) =>
      (await sql`select encrypted_password = extensions.crypt(${password}, encrypted_password) as is from auth.users where id = ${userId}`)[0].is;
    try {
      for (const [round, urls] of [[base, base], [base, other.baseUrl], [other.baseUrl, base]].entries()) {
        const account = await client.signUp(`reset-race-${round}`);
        expect((await client.send(base, '/api/auth/reset-password', { email: account.email })).status).toBe(200);
        await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
        const token = resetTokenIn((await messagesTo(account.email))[0]);
        const passwords = ['first-new-secret', 'second-new-secret'];
        const answers = await Promise.all(urls.map((url, i) => client.send(url, '/api/auth/update-password', { token, newPassword: passwords[i] })));
        expect(answers.map((answer) => answer.status).sort(), `round ${round}`).toEqual([200, 400]);
        expect(answers.find((answer) => answer.status === 400)!.body).toEqual({ success: false, error: 'Invalid or expired reset token', statusCode: 400 });
        expect(await passwordIs(account.id, passwords[answers.findIndex((answer) => answer.status === 200)])).toBe(true);
      }
      expectRunning(other);
    } finally {
      await other.stop();
    }
  });

  it("a second reset within the auth server's minute is 429 with the seconds it says are left, in the body and the header", { timeout: 30_000 }, async () => {
    const account = await signUp(base, 'reset-again');
    expect((await call(base, 'POST', '/api/auth/reset-password', { body: { email: account.email } })).status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 2_500));
    const again = await call(base, 'POST', '/api/auth/reset-password', { body: { email: account.email } });
    expect(again.status).toBe(429);
    // 60 s a minute, 2.5 s of it gone: the auth server says 57 (rounded down), the client waits 58.
    expect(again.body).toMatchObject({ success: false, error: 'Too many requests. Please try again later.', statusCode: 429 });
    expect(again.body.retryAfter).toBeGreaterThanOrEqual(50);
    expect(again.body.retryAfter).toBeLessThanOrEqual(58);
    expect(again.headers.get('retry-after')).toBe(String(again.body.retryAfter));
  });

  it("the dashboard's sign-out when the auth server does not end the session: ended in the database; when the database cannot either, 503 and the cookie kept; a sign-in that fails after the auth server opened its session ends it", { timeout: 30_000 }, async () => {
    // A gateway that answers the auth server's /logout with a 502 while asked to.
    let refuseLogout = true;
    const refusedLogouts: string[] = [];
    const gateway = await startAuthGateway(auth!, async (request, response, forward) => {
      if (refuseLogout && request.url?.startsWith('/auth/v1/logout')) {
        refusedLogouts.push(request.url);
        return void response.writeHead(502, { 'content-type': 'text/plain' }).end('bad gateway');
      }
      const upstream = await forward();
      response.writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json' }).end(await upstream.text());
    });
    // The same, over a database nobody listens for.
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const env = realAuthEnv({ ...auth!, url: gateway.url });
    const withDatabase = await buildTestApp(env);
    const withoutDatabase = await buildTestApp({ ...env, DATABASE_URL: `postgres://postgres@127.0.0.1:${closedPort}/none`, DATABASE_ACQUIRE_TIMEOUT_MS: '500' });
    const cookieOf = (token: string) => ({ cookie: `${SESSION_COOKIE}=${token}` });
    const sessionsOf = async (userId: string) => (await sql`select count(*)::int as n from auth.sessions where user_id = ${userId}`)[0].n;
    try {
      const admin = await signUp(base, 'dashboard-signout');
      await sql`insert into public.user_roles (user_id, role) values (${admin.id}, 'admin')`;
      const signIn = async (app: FastifyInstance) =>
        app.inject({ method: 'POST', url: '/admin/status/session', payload: { email: admin.email, password: admin.password } });
      const token = (await signIn(withDatabase)).cookies.find((cookie) => cookie.name === SESSION_COOKIE)!.value;
      expect((await withDatabase.inject({ method: 'GET', url: '/admin/status', headers: cookieOf(token) })).statusCode).toBe(200);

      // Neither the auth server nor the database ends it: 503, the cookie stays, the session still works.
      const failed = await withoutDatabase.inject({ method: 'DELETE', url: '/admin/status/session', headers: cookieOf(token) });
      expect(failed.statusCode).toBe(503);
      expect(failed.json()).toMatchObject({ success: false, statusCode: 503 });
      expect(failed.headers['set-cookie']).toBeUndefined();
      expect((await me(token)).status).toBe(200);

      // The auth server does not end it, the database does.
      const signedOut = await withDatabase.inject({ method: 'DELETE', url: '/admin/status/session', headers: cookieOf(token) });
      expect(signedOut.statusCode).toBe(200);
      expect(signedOut.json()).toEqual({ success: true, message: 'Signed out' });
      expect(signedOut.cookies.find((cookie) => cookie.name === SESSION_COOKIE)?.value).toBe('');
      expect(refusedLogouts).toEqual(['/auth/v1/logout?scope=local', '/auth/v1/logout?scope=local']);
      expect((await withDatabase.inject({ method: 'GET', url: '/admin/status', headers: cookieOf(token) })).statusCode).toBe(401);
      // The server process saw the session alive a moment ago: it asks again within 5 s.
      await expect.poll(async () => (await me(token)).status, { timeout: 10_000 }).toBe(401);
      expect(await sessionsOf(admin.id)).toBe(1); // the sign-up's

      // A sign-in whose admin check fails (503) ends the session it opened: nobody holds its refresh token.
      refuseLogout = false;
      const unchecked = await signIn(withoutDatabase);
      expect(unchecked.statusCode).toBe(503);
      expect(unchecked.headers['set-cookie']).toBeUndefined();
      expect(await sessionsOf(admin.id)).toBe(1);
      // So does the API's sign-in whose profile read fails.
      const unread = await withoutDatabase.inject({ method: 'POST', url: '/api/auth/signin', payload: { email: admin.email, password: admin.password } });
      expect(unread.statusCode).toBe(503);
      expect(await sessionsOf(admin.id)).toBe(1);
    } finally {
      await withoutDatabase.close();
      await withDatabase.close();
      await gateway.close();
    }
  });

  it('link: an id token of the OIDC issuer links a keycloak identity; the same link again is 200; another account cannot take it (409); garbage is 400', { timeout: 30_000 }, async () => {
    const owner = await signUp(base, 'link-owner');
    const idpEmail = uniqueEmail('idp');
    const idToken = await idTokenFor(auth!, idpEmail);
    const linked = await post('/api/auth/link', { provider: 'keycloak', token: idToken }, owner.accessToken);
    expect(linked.status).toBe(200);
    expect(linked.body).toMatchObject({ success: true, message: expect.any(String) });
    // A client that lost the answer sends the same request again; the identity
    // is the caller's already, which is what it asked for: the first answer again.
    // So is a fresh id token of the same identity.
    const retried = await post('/api/auth/link', { provider: 'keycloak', token: idToken }, owner.accessToken);
    expect([retried.status, retried.body]).toEqual([200, linked.body]);
    const relinked = await post('/api/auth/link', { provider: 'keycloak', token: await idTokenFor(auth!, idpEmail) }, owner.accessToken);
    expect([relinked.status, relinked.body]).toEqual([200, linked.body]);
    const identities = await sql`select provider, identity_data->>'email' as email from auth.identities where user_id = ${owner.id} order by provider`;
    expect(identities).toEqual([
      { provider: 'email', email: owner.email },
      { provider: 'keycloak', email: idpEmail },
    ]);
    // The caller's own token still works after linking.
    expect((await me(owner.accessToken)).status).toBe(200);
    // The auth server's id-token grant opens a session of its own as it links;
    // nobody holds its tokens, so it must not stay open: the caller's is the only one.
    const sessions = await sql`select id from auth.sessions where user_id = ${owner.id}`;
    expect(sessions.map((session) => session.id)).toEqual([decodeJwt(owner.accessToken).session_id]);

    const other = await signUp(base, 'link-other');
    const taken = await post('/api/auth/link', { provider: 'keycloak', token: await idTokenFor(auth!, idpEmail) }, other.accessToken);
    expect(taken.status).toBe(409);
    expect(taken.body).toEqual({ success: false, error: 'Identity is already linked to an account', statusCode: 409 });

    // A caller's token in the 5 s past its expiry that the API still takes and the auth server
    // refuses: the caller's token is the problem (401, refresh and retry), not the provider's.
    const late = await post('/api/auth/link', { provider: 'keycloak', token: await idTokenFor(auth!, uniqueEmail('idp-late')) }, await expiredCopy(other.accessToken, TEST_JWT_SECRET, 1));
    expect(late.body).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });

    const garbage = await post('/api/auth/link', { provider: 'keycloak', token: 'garbage' }, other.accessToken);
    expect(garbage.status).toBe(400);
    expect(garbage.body).toEqual({ success: false, error: 'Invalid provider token', statusCode: 400 });
    const unsupported = await post('/api/auth/link', { provider: 'myspace', token: 'x' }, other.accessToken);
    expect(unsupported.status).toBe(400);
    expect(unsupported.body.error).toBe('Unsupported provider');
    expect((await post('/api/auth/link', { provider: 'keycloak', token: 'x' })).status).toBe(401);
    expectRunning(server);
    expect((await me(other.accessToken)).status).toBe(200);
  });

  it('one identity linked twice at once (by two accounts, or by one twice) is linked once; the other link is 409, or 200 for the same account, never 500', { timeout: 60_000 }, async () => {
    // Both passed the auth server's check for a linked identity, and the
    // second insert failed in its database: a 500 'Error creating identity'.
    // Asked again, the auth server says the identity is linked: to another
    // account a 409, to the caller's own (a double click) what was asked. So
    // does a request that came after the other's link was stored.
    const client = clientAt(anotherAddress());
    for (let round = 0; round < 4; round += 1) {
      const first = await client.signUp(`link-race-a-${round}`);
      // Odd rounds: the same account twice (a double click).
      const second = round % 2 ? first : await client.signUp(`link-race-b-${round}`);
      const idpEmail = uniqueEmail('idp-race');
      const tokens = [await idTokenFor(auth!, idpEmail), await idTokenFor(auth!, idpEmail)];
      const answers = await Promise.all(
        [first, second].map((account, i) => client.send(base, '/api/auth/link', { provider: 'keycloak', token: tokens[i] }, account.accessToken)),
      );
      const statuses = answers.map((answer) => answer.status).sort();
      if (first === second) expect(statuses, `round ${round}`).toEqual([200, 200]);
      else expect(statuses, `round ${round}`).toEqual([200, 409]);
      for (const refused of answers.filter((answer) => answer.status === 409)) {
        expect(refused.body).toEqual({ success: false, error: 'Identity is already linked to an account', statusCode: 409 });
      }
      const linkedTo = await sql`select user_id from auth.identities where provider = 'keycloak' and identity_data->>'email' = ${idpEmail}`;
      expect(linkedTo).toEqual([{ user_id: [first, second][answers.findIndex((answer) => answer.status === 200)].id }]);
      // No session a grant opened is left: each account has its sign-up's alone.
      for (const account of new Set([first, second])) {
        const sessions = await sql`select id from auth.sessions where user_id = ${account.id}`;
        expect(sessions.map((session) => session.id)).toEqual([decodeJwt(account.accessToken).session_id]);
      }
    }
    expectRunning(server);
  });

  it('link whose first answer is a 500 after the link was stored: the caller\'s own link is 200; another account\'s identity stays 409', { timeout: 30_000 }, async () => {
    // A gateway that passes the grant on to the auth server, which links, and
    // then answers 500 for it, as an auth server failing after its write would.
    // The route asks once more, and the auth server says the identity is linked.
    const grants: { status: number; answered: number }[] = [];
    let failNextGrant = false;
    const gateway = await startAuthGateway(auth!, async (request, response, forward) => {
      const upstream = await forward();
      const body = await upstream.text();
      if (request.url?.startsWith('/auth/v1/token?grant_type=id_token')) {
        const failed = failNextGrant;
        failNextGrant = false;
        grants.push({ status: upstream.status, answered: failed ? 500 : upstream.status });
        if (failed) return void response.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ code: 500, error_code: 'unexpected_failure', msg: 'Unexpected failure' }));
      }
      // With its API version: supabase-js reads the error's code by it.
      const version = upstream.headers.get('x-supabase-api-version');
      response
        .writeHead(upstream.status, { 'content-type': upstream.headers.get('content-type') ?? 'application/json', ...(version ? { 'x-supabase-api-version': version } : {}) })
        .end(body);
    });
    const behindGateway = await buildTestApp(realAuthEnv({ ...auth!, url: gateway.url }));
    const link = (accessToken: string, token: string) =>
      behindGateway.inject({ method: 'POST', url: '/api/auth/link', headers: { authorization: `Bearer ${accessToken}` }, payload: { provider: 'keycloak', token } });
    try {
      const owner = await signUp(base, 'link-500-owner');
      const idpEmail = uniqueEmail('idp-500');
      failNextGrant = true;
      const linked = await link(owner.accessToken, await idTokenFor(auth!, idpEmail));
      // The first grant linked (200 from the auth server) and was answered 500; the second was refused as linked.
      expect(grants).toEqual([
        { status: 200, answered: 500 },
        { status: 422, answered: 422 },
      ]);
      expect([linked.statusCode, linked.json()]).toEqual([200, { success: true, message: 'Identity linked successfully' }]);
      const linkedTo = await sql`select user_id from auth.identities where provider = 'keycloak' and identity_data->>'email' = ${idpEmail}`;
      expect(linkedTo).toEqual([{ user_id: owner.id }]);

      // The same answers for an identity another account holds: the conflict it is.
      grants.length = 0;
      const other = await signUp(base, 'link-500-other');
      failNextGrant = true;
      const taken = await link(other.accessToken, await idTokenFor(auth!, idpEmail));
      expect(grants).toEqual([
        { status: 422, answered: 500 },
        { status: 422, answered: 422 },
      ]);
      expect([taken.statusCode, taken.json()]).toEqual([409, { success: false, error: 'Identity is already linked to an account', statusCode: 409 }]);
    } finally {
      await behindGateway.close();
      await gateway.close();
    }
  });

  it('link: an id token that carries a nonce links with the nonce it was made for, not without it or with another; a nonce sent with a token that has none is refused', { timeout: 30_000 }, async () => {
    const owner = await signUp(base, 'link-nonce');
    const idpEmail = uniqueEmail('idp-nonce');
    // A front end keeps the raw nonce and hands the provider its SHA-256 (hex).
    const nonce = randomBytes(16).toString('hex');
    const idToken = await idTokenFor(auth!, idpEmail, { nonce: createHash('sha256').update(nonce).digest('hex') });
    expect(decodeJwt(idToken).nonce).toEqual(expect.any(String));

    const invalid = { success: false, error: 'Invalid provider token', statusCode: 400 };
    const withoutNonce = await post('/api/auth/link', { provider: 'keycloak', token: idToken }, owner.accessToken);
    expect(withoutNonce.status).toBe(400);
    expect(withoutNonce.body).toEqual(invalid);
    const otherNonce = await post('/api/auth/link', { provider: 'keycloak', token: idToken, nonce: `${nonce}x` }, owner.accessToken);
    expect(otherNonce.body).toEqual(invalid);
    const blank = await post('/api/auth/link', { provider: 'keycloak', token: idToken, nonce: '' }, owner.accessToken);
    expect(blank.status).toBe(400);
    expect(blank.body).toMatchObject({ error: 'Validation failed', details: { nonce: ['Nonce must not be empty'] } });
    const noNonceToken = await idTokenFor(auth!, uniqueEmail('idp-no-nonce'));
    expect((await post('/api/auth/link', { provider: 'keycloak', token: noNonceToken, nonce }, owner.accessToken)).body).toEqual(invalid);
    expect(await sql`select 1 from auth.identities where user_id = ${owner.id} and provider = 'keycloak'`).toHaveLength(0);

    const linked = await post('/api/auth/link', { provider: 'keycloak', token: idToken, nonce }, owner.accessToken);
    expect(linked.status).toBe(200);
    const identities = await sql`select identity_data->>'email' as email from auth.identities where user_id = ${owner.id} and provider = 'keycloak'`;
    expect(identities).toEqual([{ email: idpEmail }]);
  });

  it('after all of it the server process is still serving and logged no unhandled rejection', async () => {
    expectRunning(server);
    expect((await fetch(`${base}/health`)).status).toBe(200);
    expect(server.output()).not.toMatch(/unhandled|uncaught|AuthSessionMissingError/i);
  });
});

describe.runIf(auth)("the auth server's own per-IP limits count our clients, not our server", () => {
  /** Calls `path` of the auth server as `address` until it answers 429 (true), or 40 times (false). */
  async function useUpAuthBudget(path: string, address: string): Promise<boolean> {
    for (let i = 0; i < 40; i += 1) {
      const direct = await fetch(`${auth!.url}${path}`, {
        method: 'POST',
        headers: { apikey: auth!.anonKey, 'content-type': 'application/json', 'x-forwarded-for': address },
        body: JSON.stringify({ email: uniqueEmail('burst'), password: 'x' }),
      });
      if (direct.status === 429) return true;
    }
    return false;
  }

  it('a client whose address used up the sign-up budget is refused with 429; another client is not', { timeout: 30_000 }, async () => {
    const app = await buildTestApp(realAuthEnv(auth!));
    try {
      const crowded = '203.0.113.7';
      // The auth server allows a burst of 30 sign-ups per address (then one per 10 s);
      // use it up for one address straight at the gateway, as that client would.
      // Counted before the password is checked, so no account is made.
      expect(await useUpAuthBudget('/auth/v1/signup', crowded)).toBe(true);
      const signup = (remoteAddress: string) =>
        app.inject({
          method: 'POST',
          url: '/api/auth/signup',
          remoteAddress,
          payload: { email: uniqueEmail('per-ip'), password: 'secret1', name: 'Per Ip' },
        });
      const refused = await signup(crowded);
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ success: false, error: 'Too many requests. Please try again later.', statusCode: 429 });
      // The auth server's refusal carries Retry-After as our own budgets' does.
      expect(refused.headers['retry-after']).toBe(String(refused.json().retryAfter));
      expect((await signup('198.51.100.23')).statusCode).toBe(201);
    } finally {
      await app.close();
    }
  });

  it("the dashboard's sign-in from an address whose sign-in budget is used up is 429, not a wrong password", { timeout: 30_000 }, async () => {
    const app = await buildTestApp(realAuthEnv(auth!));
    try {
      const crowded = '203.0.113.8';
      // 30 password grants per address in a burst; counted before the credentials are read.
      expect(await useUpAuthBudget('/auth/v1/token?grant_type=password', crowded)).toBe(true);
      const signIn = (remoteAddress: string) =>
        app.inject({ method: 'POST', url: '/admin/status/session', remoteAddress, payload: { email: uniqueEmail('dashboard'), password: 'secret1' } });
      const refused = await signIn(crowded);
      expect([refused.statusCode, refused.json()]).toEqual([429, { success: false, error: 'Too many requests. Please try again later.', statusCode: 429, retryAfter: 60 }]);
      expect(refused.headers['retry-after']).toBe('60');
      // The pages' scope has no no-store hook of its own: the 429 carries it all the same.
      expect(refused.headers['cache-control']).toBe('no-store');
      // From another address the same credentials are what they are: unknown.
      expect((await signIn('198.51.100.24')).json()).toMatchObject({ statusCode: 401, error: 'Invalid email or password' });
    } finally {
      await app.close();
    }
  });
});
