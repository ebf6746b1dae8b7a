import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';

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
