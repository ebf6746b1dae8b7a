import { type AddressInfo, createServer } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type AuthServer, startAuthServer } from '../scripts/stack/auth-server.ts';
import { readAuthSettings } from '../scripts/stack/supabase-config.ts';
import { buildTestApp, buildTestAppWithLog, TEST_JWT_SECRET } from './support/app.ts';
import { call, realAuth, realAuthEnv, signUp } from './support/real-auth.ts';
import { startSilentServer } from './support/silent-server.ts';

// The auth server stopped mid-run: its routes answer 503 "Authentication
// service unavailable" within the deadline, signed-in callers keep working
// (tokens are verified here), and everything recovers when it is back. The
// suite runs an auth server of its own on this run's database, so stopping
// it disturbs no other suite.

const auth = realAuth();

describe.runIf(auth)('Supabase Auth stopped and restarted', () => {
  let own: AuthServer;
  let app: FastifyInstance;
  let base: string;

  beforeAll(async () => {
    own = await startAuthServer({
      binary: auth!.binary,
      databaseUrl: inject('stack').databaseUrl,
      jwtSecret: TEST_JWT_SECRET,
      settings: await readAuthSettings(),
      smtp: { host: '127.0.0.1', port: inject('stack').smtpPort },
      migrate: false,
    });
    app = await buildTestApp({ ...realAuthEnv({ ...auth!, url: own.url, anonKey: own.anonKey, serviceRoleKey: own.serviceRoleKey }), AUTH_TIMEOUT_MS: '3000' });
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await own?.stop();
  });

  it('answers 503 while it is down, keeps signed-in callers working, and recovers', { timeout: 40_000 }, async () => {
    const account = await signUp(base, 'outage');
    await own.stopServer();

    const unavailable = { success: false, error: 'Authentication service unavailable', statusCode: 503, requestId: expect.any(String) };
    for (const [path, body] of [
      ['/api/auth/signin', { email: account.email, password: account.password }],
      ['/api/auth/signup', { email: `x-${account.email}`, password: 'secret1', name: 'Nobody' }],
      ['/api/auth/refresh', { refreshToken: account.refreshToken }],
      ['/api/auth/reset-password', { email: account.email }],
    ] as const) {
      const started = Date.now();
      const answer = await call(base, 'POST', path, { body });
      expect(answer.status, path).toBe(503);
      expect(answer.body).toEqual(unavailable);
      expect(Date.now() - started, `${path} answered within the deadline`).toBeLessThan(4_000);
    }
    // Tokens are verified here against the database, so a signed-in caller is not affected.
    expect((await call(base, 'GET', '/api/auth/me', { token: account.accessToken })).status).toBe(200);

    await own.startServer();
    const back = await call(base, 'POST', '/api/auth/signin', { body: { email: account.email, password: account.password } });
    expect(back.status).toBe(200);
    expect((await call(base, 'POST', '/api/auth/refresh', { body: { refreshToken: back.body.data.session.refreshToken } })).status).toBe(200);
  });
});

describe('an auth server that cannot be reached: the log line says why', () => {
  it('a refused connection: the 503 is logged with ECONNREFUSED and its message, not only `fetch failed`', async () => {
    // A port that was just free: nothing listens there, so the connection is refused.
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    const { app, lines } = await appWithAuthServerAt(`http://127.0.0.1:${closedPort}`, '3000');
    try {
      const answer = await app.inject({ method: 'POST', url: '/api/auth/signin', payload: { email: 'nobody@example.test', password: 'secret1' } });
      expect(answer.statusCode).toBe(503);
      expect(answer.json().error).toBe('Authentication service unavailable');
      const failed = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request failed');
      expect(failed).toHaveLength(1);
      expect(failed[0].err.message).toBe(`Authentication service unavailable: fetch failed: connect ECONNREFUSED 127.0.0.1:${closedPort}`);
      // Never to the client.
      expect(answer.body).not.toContain('ECONNREFUSED');
    } finally {
      await app.close();
    }
  });

  it('an auth server that never answers: the line says our deadline ran out, not `The operation was aborted`', async () => {
    const hung = await startSilentServer();
    const { app, lines } = await appWithAuthServerAt(`http://127.0.0.1:${hung.port}`, '500');
    try {
      const answer = await app.inject({ method: 'POST', url: '/api/auth/signin', payload: { email: 'nobody@example.test', password: 'secret1' } });
      expect(answer.statusCode).toBe(503);
      const failed = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request failed');
      expect(failed.map((entry) => entry.err.message)).toEqual(['Authentication service unavailable: no answer from the auth server within 500 ms']);
    } finally {
      await app.close();
      await hung.close();
    }
  });
});

/** An app whose auth server is at `url`, each call given `timeoutMs`, and its log lines. */
function appWithAuthServerAt(url: string, timeoutMs: string) {
  return buildTestAppWithLog({ SUPABASE_URL: url, SUPABASE_ANON_KEY: 'anon-key', SUPABASE_SERVICE_ROLE_KEY: 'service-key', AUTH_TIMEOUT_MS: timeoutMs });
}
