import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { HOLD_MARGIN_MS, holdMs, REDEMPTION_AUTH_CALLS } from '../src/modules/auth/password-reset.ts';
import { buildTestApp } from './support/app.ts';
import { createAuthUser } from './support/db.ts';

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
