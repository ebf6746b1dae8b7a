import { createHash, randomBytes, randomInt } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import { HOLD_MARGIN_MS, holdMs, REDEMPTION_AUTH_CALLS } from '../src/modules/auth/password-reset.ts';
import { buildTestApp, buildTestAppWithLog, testConfig } from './support/app.ts';
import { createAuthUser } from './support/db.ts';
import { call, messagesTo, realAuth, realAuthEnv, resetTokenIn, signUp } from './support/real-auth.ts';

// POST /api/auth/update-password checks the new password before it asks the
// auth server anything (a reset token works once), so these answers need no
// auth server: it is unreachable here, and a request that passes the checks
// gets 503.

const UNREACHABLE_AUTH = {
  SUPABASE_URL: 'http://127.0.0.1:1',
  SUPABASE_ANON_KEY: 'anon-key',
  SUPABASE_SERVICE_ROLE_KEY: 'service-key',
  AUTH_TIMEOUT_MS: '1500',
};

describe('update-password: the new password checked before the token', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp(UNREACHABLE_AUTH);
  });
  afterAll(async () => app.close());

  const updatePassword = (payload: unknown) =>
    app.inject({ method: 'POST', url: '/api/auth/update-password', payload: payload as object, headers: { 'content-type': 'application/json' } });

  it('a missing, null or empty newPassword is 400 `New password is required`, not a length error (a password sent under another name)', async () => {
    const required = { success: false, error: 'New password is required', statusCode: 400, details: { newPassword: ['New password is required'] } };
    for (const body of [
      { token: 'a-token-hash', password: 'newsecret789' },
      { token: 'a-token-hash' },
      { token: 'a-token-hash', newPassword: null },
      { token: 'a-token-hash', newPassword: '' },
      {},
    ]) {
      const response = await updatePassword(body);
      expect(response.statusCode, JSON.stringify(body)).toBe(400);
      expect(response.json(), JSON.stringify(body)).toEqual(required);
    }
  });

  it('a present but short one keeps the SPEC\'s `Password must be at least 6 characters`; a good one reaches the auth server', async () => {
    const short = await updatePassword({ token: 'a-token-hash', newPassword: '12345' });
    expect(short.statusCode).toBe(400);
    expect(short.json()).toEqual({
      success: false,
      error: 'Password must be at least 6 characters',
      statusCode: 400,
      details: { newPassword: ['Password must be at least 6 characters'] },
    });
    const passed = await updatePassword({ token: 'a-token-hash', newPassword: 'newsecret789' });
    expect(passed.statusCode).toBe(503);
  });
});

describe('the holds on a reset token and a reset address outlast the auth server calls they guard', () => {
  // Each call to the auth server may take AUTH_TIMEOUT_MS: a redemption makes
  // up to three, the reset e-mail one. A fixed one-minute hold lapsed during a
  // redemption with a 25 s deadline, and a second request could redeem the
  // token again. The auth server is unreachable here (every call fails at
  // once), so only the hold each request takes is watched.
  const authTimeoutMs = 25_000;
  let app: FastifyInstance;
  let sql: postgres.Sql;
  const taken: { key: string; ttlMs: number | undefined }[] = [];
  beforeAll(async () => {
    app = await buildTestApp({ ...UNREACHABLE_AUTH, AUTH_TIMEOUT_MS: String(authTimeoutMs) });
    const claim = app.exclusiveClaims.claim.bind(app.exclusiveClaims);
    app.exclusiveClaims.claim = async (key, ttlMs) => {
      taken.push({ key, ttlMs });
      return claim(key, ttlMs);
    };
    sql = postgres(inject('stack').databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await app.close();
    await sql.end();
  });

  it('update-password holds its token for three calls of AUTH_TIMEOUT_MS and a margin, reset-password its address for one', async () => {
    const updated = await app.inject({ method: 'POST', url: '/api/auth/update-password', payload: { token: 'a-token-hash', newPassword: 'newsecret789' } });
    expect(updated.statusCode).toBe(503);
    const user = await createAuthUser(sql);
    const reset = await app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: { email: user.email } });
    expect(reset.statusCode).toBe(503);

    expect(taken.map(({ key }) => key.split(':')[0])).toEqual(['password-update', 'password-reset']);
    const [redemption, resetEmail] = taken.map(({ ttlMs }) => ttlMs);
    expect(redemption).toBe(3 * authTimeoutMs + HOLD_MARGIN_MS);
    expect(resetEmail).toBe(authTimeoutMs + HOLD_MARGIN_MS);
    expect(redemption).toBeGreaterThan(60_000);
  });

  it('the hold follows AUTH_TIMEOUT_MS', () => {
    expect(holdMs(REDEMPTION_AUTH_CALLS, 10_000)).toBe(60_000);
    expect(holdMs(REDEMPTION_AUTH_CALLS, 40_000)).toBe(150_000);
    expect(holdMs(1, 90_000)).toBe(120_000);
  });
});

// A reset token is the auth server's hex(SHA-224(e-mail + code)): anyone who
// knows an address can list every token it may have. Two brakes, against the
// real auth server: codes of 10 digits (supabase/config.toml otp_length, which
// the stack passes on), and one budget of redemptions shared by every client
// (modules/auth/reset-token-budget.ts), spent before the auth server is asked.
const auth = realAuth();

describe.runIf(auth)('update-password: reset tokens cannot be guessed', () => {
  const WINDOW_MS = 4_000;
  const BUDGET = 5;
  let sql: postgres.Sql;
  beforeAll(() => {
    sql = postgres(inject('stack').databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => sql.end());

  const wrongToken = () => randomBytes(28).toString('hex');
  const address = () => `10.${randomInt(256)}.${randomInt(256)}.${1 + randomInt(254)}`;
  const updatePassword = (app: FastifyInstance, token: string, newPassword: string, from = address()) =>
    app.inject({ method: 'POST', url: '/api/auth/update-password', payload: { token, newPassword }, headers: { 'x-forwarded-for': from } });
  const passwordIs = async (userId: string, password: string) =>
    (await sql`select encrypted_password = extensions.crypt(${password}, encrypted_password) as is from auth.users where id = ${userId}`)[0].is as boolean;
  const sha224 = (text: string) => createHash('sha224').update(text).digest('hex');

  /** An account signed up through `base`, and the token of the reset e-mail it was sent. */
  const accountWithResetToken = async (base: string, label: string) => {
    const account = await signUp(base, label);
    expect((await call(base, 'POST', '/api/auth/reset-password', { body: { email: account.email } })).status).toBe(200);
    await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
    return { account, token: resetTokenIn((await messagesTo(account.email))[0]) };
  };
  const listening = async (app: FastifyInstance) => app.listen({ host: '127.0.0.1', port: 0 });
  // A function: the describe's body is read to collect its tests even without an auth server, when `auth` is null.
  const budgetEnv = () => ({ ...realAuthEnv(auth!), RESET_TOKEN_ATTEMPTS_PER_WINDOW: String(BUDGET), RESET_TOKEN_WINDOW_MS: String(WINDOW_MS) });
  const TOO_MANY = { success: false, error: 'Too many requests. Please try again later.', statusCode: 429, retryAfter: expect.any(Number) };

  it('the code behind a reset token has 10 digits: 10^10 candidates per address, not 10^6', async () => {
    const app = await buildTestApp(realAuthEnv(auth!));
    try {
      const { account, token } = await accountWithResetToken(await listening(app), 'reset-otp-length');
      expect(token).toMatch(/^[0-9a-f]{56}$/);
      // The e-mail carries only the hash; the auth server's admin API answers the code with its hash.
      const response = await fetch(`${auth!.url}/auth/v1/admin/generate_link`, {
        method: 'POST',
        headers: { apikey: auth!.serviceRoleKey, authorization: `Bearer ${auth!.serviceRoleKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ type: 'recovery', email: account.email }),
      });
      expect(response.status).toBe(200);
      const link = (await response.json()) as { email_otp: string; hashed_token: string };
      expect(link.email_otp).toMatch(/^\d{10}$/);
      expect(link.hashed_token).toBe(sha224(account.email + link.email_otp));
    } finally {
      await app.close();
    }
  }, 30_000);

  it('wrong tokens from many addresses spend one budget: then even the right token is 429, its password unchanged, once, with one warning; after the window it works', async () => {
    const { app, lines } = await buildTestAppWithLog(budgetEnv(), 'warn');
    try {
      const { account, token } = await accountWithResetToken(await listening(app), 'reset-budget');
      for (let i = 0; i < BUDGET; i += 1) {
        const wrong = await updatePassword(app, wrongToken(), 'guessed-secret');
        expect(wrong.statusCode, `guess ${i + 1}`).toBe(400);
        expect(wrong.json()).toEqual({ success: false, error: 'Invalid or expired reset token', statusCode: 400 });
      }
      for (const newPassword of ['right-but-refused', 'right-but-refused-again']) {
        const refused = await updatePassword(app, token, newPassword);
        expect(refused.statusCode).toBe(429);
        expect(refused.json()).toEqual(TOO_MANY);
        const retryAfter = refused.json().retryAfter as number;
        expect(retryAfter).toBeGreaterThanOrEqual(1);
        expect(retryAfter).toBeLessThanOrEqual(WINDOW_MS / 1000);
        expect(refused.headers['retry-after']).toBe(String(retryAfter));
      }
      expect(await passwordIs(account.id, account.password)).toBe(true);
      const warnings = lines.filter((line) => line.includes('reset-token budget spent'));
      expect(warnings).toHaveLength(1);
      expect(JSON.parse(warnings[0])).toMatchObject({ level: 40, budget: BUDGET, windowMs: WINDOW_MS });
      expect(lines.some((line) => line.includes(token))).toBe(false);

      await new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 200));
      const updated = await updatePassword(app, token, 'after-the-window');
      expect(updated.statusCode).toBe(200);
      expect(await passwordIs(account.id, 'after-the-window')).toBe(true);
    } finally {
      await app.close();
    }
  }, 40_000);

  it('guesses sent at once are counted before the auth server is asked: no more than the budget reach it', async () => {
    const app = await buildTestApp(budgetEnv());
    try {
      const answers = await Promise.all(Array.from({ length: BUDGET + 4 }, () => updatePassword(app, wrongToken(), 'guessed-secret')));
      expect(answers.map((answer) => answer.statusCode).sort()).toEqual([...Array(BUDGET).fill(400), ...Array(4).fill(429)]);
    } finally {
      await app.close();
    }
  }, 30_000);

  it("without a budget set (the default) no guess is refused for the count: the auth server's own /verify takes the same token, so the code's length is the defence", async () => {
    const app = await buildTestApp(realAuthEnv(auth!));
    try {
      const answers = await Promise.all(Array.from({ length: BUDGET + 4 }, () => updatePassword(app, wrongToken(), 'guessed-secret')));
      expect(answers.map((answer) => answer.statusCode)).toEqual(Array(BUDGET + 4).fill(400));
    } finally {
      await app.close();
    }
  }, 30_000);

  it('with Redis, two instances share the budget: guesses at one and the other refuse the right token at both', async () => {
    const shared = { redisNamespace: `reset-budget-${randomBytes(6).toString('hex')}:` };
    const config = testConfig({ ...budgetEnv(), REDIS_URL: 'redis://127.0.0.1:6379' });
    const [first, second] = await Promise.all([buildApp({ config, rateLimit: shared }), buildApp({ config, rateLimit: shared })]);
    try {
      const { account, token } = await accountWithResetToken(await listening(first), 'reset-budget-redis');
      for (let i = 0; i < BUDGET; i += 1) {
        expect((await updatePassword(i % 2 === 0 ? first : second, wrongToken(), 'guessed-secret')).statusCode, `guess ${i + 1}`).toBe(400);
      }
      for (const app of [first, second]) {
        const refused = await updatePassword(app, token, 'right-but-refused');
        expect(refused.statusCode).toBe(429);
        expect(refused.json()).toEqual(TOO_MANY);
      }
      expect(await passwordIs(account.id, account.password)).toBe(true);
      await new Promise((resolve) => setTimeout(resolve, WINDOW_MS + 200));
      expect((await updatePassword(second, token, 'after-the-window')).statusCode).toBe(200);
      expect(await passwordIs(account.id, 'after-the-window')).toBe(true);
    } finally {
      await Promise.all([first.close(), second.close()]);
    }
  }, 40_000);
});

describe.runIf(auth)('update-password with the password the account already has', () => {
  // The auth server refuses to "change" a password to itself (same_password),
  // after the token is spent. It was a 400 that sent the user for a new e-mail,
  // which the minute's limit then refused (429); the password is the one asked for.
  let app: FastifyInstance;
  let base: string;
  beforeAll(async () => {
    app = await buildTestApp(realAuthEnv(auth!));
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  }, 60_000);
  afterAll(async () => app?.close());

  it('is answered as a success: 200, the password unchanged and working, every session ended, the token spent', async () => {
    const account = await signUp(base, 'reset-same-password');
    expect((await call(base, 'POST', '/api/auth/reset-password', { body: { email: account.email } })).status).toBe(200);
    await expect.poll(async () => (await messagesTo(account.email)).length, { timeout: 10_000 }).toBe(1);
    const token = resetTokenIn((await messagesTo(account.email))[0]);

    const same = await call(base, 'POST', '/api/auth/update-password', { body: { token, newPassword: account.password } });
    expect(same.body).toEqual({ success: true, message: 'Password updated successfully' });
    expect(same.status).toBe(200);

    // As after any reset: the sessions from before it have ended.
    expect((await call(base, 'GET', '/api/auth/me', { token: account.accessToken })).status).toBe(401);
    expect((await call(base, 'POST', '/api/auth/refresh', { body: { refreshToken: account.refreshToken } })).status).toBe(401);
    const signIn = await call(base, 'POST', '/api/auth/signin', { body: { email: account.email, password: account.password } });
    expect(signIn.status).toBe(200);
    const again = await call(base, 'POST', '/api/auth/update-password', { body: { token, newPassword: 'another-secret-1' } });
    expect(again.body).toEqual({ success: false, error: 'Invalid or expired reset token', statusCode: 400 });
  }, 40_000);
});
