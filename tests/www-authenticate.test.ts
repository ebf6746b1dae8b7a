import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BEARER_CHALLENGES } from '../src/lib/errors.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp, TEST_JWT_SECRET } from './support/app.ts';
import { launchChromium } from './support/browser.ts';
import { createAuthUser, openSession } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// A 401 of the Bearer token check says in WWW-Authenticate (RFC 6750) whether
// the access token expired (refresh, then retry) or is refused for good (sign
// in again): the body is the SPEC's `Authentication required` either way, and
// a front end could only tell them apart by decoding the JWT itself.

const encoder = new TextEncoder();
const now = () => Math.floor(Date.now() / 1000);
const REFUSED = { success: false, error: 'Authentication required', statusCode: 401 };

/** An access token of the session, as the auth server signs one; `expired` an hour past its end. */
function accessToken(session: { sub: string; sessionId: string }, { expired = false } = {}) {
  const issuedAt = expired ? now() - 7200 : now();
  return new SignJWT({ sub: session.sub, session_id: session.sessionId, aud: 'authenticated', role: 'authenticated', iat: issuedAt, exp: issuedAt + 3600 })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .sign(encoder.encode(TEST_JWT_SECRET));
}

let pageServer: Server;
let frontEnd: string;
let app: FastifyInstance;
const database = usePrivateDatabase('www_authenticate');
let live: { sub: string; sessionId: string };

beforeAll(async () => {
  pageServer = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Front end</title>');
  });
  await new Promise<void>((resolve) => pageServer.listen(0, '127.0.0.1', resolve));
  frontEnd = `http://127.0.0.1:${(pageServer.address() as AddressInfo).port}`;
  app = await buildTestApp({ DATABASE_URL: database.url, CORS_ORIGIN: frontEnd });
  const user = await createAuthUser(database.sql);
  live = { sub: user.id, sessionId: await openSession(database.sql, user.id) };
});
afterAll(async () => {
  await app?.close();
  if (pageServer) await new Promise((resolve) => pageServer.close(resolve));
});

const get = (url: string, token?: string) => app.inject({ method: 'GET', url, headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });

describe('WWW-Authenticate on the 401s of the Bearer token check', () => {
  it('none on an answer that succeeds; `invalid_token` "expired" for the same session\'s expired token, on every kind of guard', async () => {
    const ok = await get('/api/users/me', await accessToken(live));
    expect(ok.statusCode, ok.body).toBe(200);
    expect(ok.headers['www-authenticate']).toBeUndefined();

    const expired = await accessToken(live, { expired: true });
    // A signed-in user's route, an admin's, a role holder's, and the analytics guard (an API key or a token).
    for (const url of ['/api/users/me', '/api/auth/me', '/api/admin/metrics', '/api/websites', `/api/analytics?websiteId=${crypto.randomUUID()}`]) {
      const refused = await get(url, expired);
      expect(refused.statusCode, url).toBe(401);
      expect(refused.json(), url).toEqual(REFUSED);
      expect(refused.headers['www-authenticate'], url).toBe(BEARER_CHALLENGES.expired);
    }
    expect(BEARER_CHALLENGES.expired).toBe('Bearer error="invalid_token", error_description="The access token expired"');
  });

  it('`invalid_token` with another description for a token refused for good: garbage, another key, an ended session, the legacy token on a user route', async () => {
    const ended = { sub: live.sub, sessionId: await openSession(database.sql, live.sub) };
    await database.sql`delete from auth.sessions where id = ${ended.sessionId}`;
    const otherKey = await new SignJWT({ sub: live.sub, session_id: live.sessionId, aud: 'authenticated' })
      .setProtectedHeader({ alg: 'HS256' })
      .setExpirationTime('1h')
      .sign(encoder.encode('another-projects-secret-0123456789abcdef'));
    const legacy = (await legacyAdmin()).authorization.slice('Bearer '.length);
    for (const [label, token, url] of [
      ['garbage', 'not-a-jwt', '/api/users/me'],
      ['another key', otherKey, '/api/users/me'],
      ['an ended session', await accessToken(ended), '/api/users/me'],
      ['the legacy admin token on a user route', legacy, '/api/auth/me'],
    ]) {
      const refused = await get(url, token);
      expect(refused.statusCode, label).toBe(401);
      expect(refused.json(), label).toEqual(REFUSED);
      expect(refused.headers['www-authenticate'], label).toBe(BEARER_CHALLENGES.invalid);
      expect(refused.headers['www-authenticate'], label).not.toContain('expired"');
    }
  });

  it('`Bearer` alone when no token came (RFC 6750 section 3), sign-out included; none on the 401 of a wrong X-API-Key', async () => {
    const none = await get('/api/users/me');
    expect(none.json()).toEqual(REFUSED);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    const signOut = await app.inject({ method: 'POST', url: '/api/auth/signout' });
    expect(signOut.json()).toEqual({ success: false, error: 'No active session', statusCode: 401 });
    expect(signOut.headers['www-authenticate']).toBe('Bearer');
    const signOutGarbage = await app.inject({ method: 'POST', url: '/api/auth/signout', headers: { authorization: 'Bearer not-a-jwt' } });
    expect(signOutGarbage.headers['www-authenticate']).toBe(BEARER_CHALLENGES.invalid);

    const wrongKey = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${crypto.randomUUID()}`, headers: { 'x-api-key': 'not-a-key' } });
    expect(wrongKey.json()).toEqual(REFUSED);
    expect(wrongKey.headers['www-authenticate']).toBeUndefined();
  });
});

describe("the front end's page reads it", () => {
  let browser: Browser;
  beforeAll(async () => {
    browser = await launchChromium();
  });
  afterAll(async () => browser?.close());

  it('through CORS (Access-Control-Expose-Headers), and can tell "refresh" from "sign in again"', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${frontEnd}/`);
      const api = await app.listen({ host: '127.0.0.1', port: 0 });
      const challengeOf = (token: string) =>
        page.evaluate(
          async ({ url, token }) => {
            const response = await fetch(url, { headers: { authorization: `Bearer ${token}` }, credentials: 'include' });
            return { status: response.status, challenge: response.headers.get('www-authenticate') };
          },
          { url: `${api}/api/users/me`, token },
        );
      expect(await challengeOf(await accessToken(live, { expired: true }))).toEqual({ status: 401, challenge: BEARER_CHALLENGES.expired });
      expect(await challengeOf('not-a-jwt')).toEqual({ status: 401, challenge: BEARER_CHALLENGES.invalid });
    } finally {
      await context.close();
    }
  }, 60_000);
});
