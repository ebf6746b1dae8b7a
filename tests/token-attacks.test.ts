import { createHmac } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import fc from 'fast-check';
import { SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BEARER_CHALLENGES } from '../src/lib/errors.ts';
import { buildTestAppWithLog, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/app.ts';
import { createAuthUser, openSession } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// Token attacks on every route whose OpenAPI operation says it needs a Bearer
// token: each forged, expired, confused or malformed token is refused with
// 401 in the envelope before any handler runs. (Signed-out sessions, rotated
// refresh tokens and other users' tokens, which need the auth server, are in
// tests/auth-flows.test.ts and tests/auth-roles.test.ts.)

const encoder = new TextEncoder();
const now = () => Math.floor(Date.now() / 1000);

function sign(claims: Record<string, unknown>, secret: string) {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(encoder.encode(secret));
}

/** A JWT whose signature is an HMAC of `secret` under the header's `alg`, whatever the claims (jose's signer refuses some). */
function hmacSigned(alg: string, claims: Record<string, unknown>, secret: string) {
  const encode = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
  const signingInput = `${encode({ alg, typ: 'JWT' })}.${encode(claims)}`;
  return `${signingInput}.${createHmac('sha256', secret).update(signingInput).digest('base64url')}`;
}

/** The classic confusion: an RS256 header over an HMAC of the project secret. */
const rs256HeaderHmacSignature = (claims: Record<string, unknown>, secret: string) => hmacSigned('RS256', claims, secret);

/** A user and a session of theirs that is open: claims that name it are refused only by the token's own checks. */
interface LiveSession {
  sub: string;
  session_id: string;
}

const liveClaims = (live: LiveSession) => ({
  sub: live.sub,
  aud: 'authenticated',
  role: 'authenticated',
  session_id: live.session_id,
  iat: now(),
  exp: now() + 3600,
});

async function attacks(live: LiveSession): Promise<Record<string, string | undefined>> {
  const otherSecret = 'attacker-controlled-secret-0123456789abcdef';
  const { session_id: _dropped, ...withoutSession } = liveClaims(live);
  const legacy = { admin: true, userId: 'ops', iat: now(), exp: now() + 3600 };
  return {
    'no token': undefined,
    garbage: 'garbage',
    'three dots': 'a.b.c',
    'alg none': new UnsecuredJWT(liveClaims(live)).encode(),
    'alg none legacy admin': new UnsecuredJWT(legacy).encode(),
    'wrong key': await sign(liveClaims(live), otherSecret),
    expired: await sign({ ...liveClaims(live), iat: now() - 7200, exp: now() - 3600 }, TEST_JWT_SECRET),
    'not yet valid': await sign({ ...liveClaims(live), nbf: now() + 3600 }, TEST_JWT_SECRET),
    'another audience': await sign({ ...liveClaims(live), aud: 'some-other-project' }, TEST_JWT_SECRET),
    'no session id': await sign(withoutSession, TEST_JWT_SECRET),
    // Signed with the project's secret, so only its holder could make them; the auth server never does.
    'a subject that is no UUID': await sign({ ...liveClaims(live), sub: 'not-a-uuid' }, TEST_JWT_SECRET),
    'a session id that is no UUID': await sign({ ...liveClaims(live), session_id: 'not-a-uuid' }, TEST_JWT_SECRET),
    'expired, with a session id that is no UUID': await sign({ ...liveClaims(live), session_id: 'not-a-uuid', iat: now() - 7200, exp: now() - 3600 }, TEST_JWT_SECRET),
    'anon key as a user': await sign({ role: 'anon', iss: 'supabase', iat: now(), exp: now() + 3600 }, TEST_JWT_SECRET),
    'user token signed with the admin secret': await sign(liveClaims(live), TEST_ADMIN_JWT_SECRET),
    'legacy token signed with the project secret': await sign(legacy, TEST_JWT_SECRET),
    'legacy admin false': await sign({ ...legacy, admin: false }, TEST_ADMIN_JWT_SECRET),
    'legacy admin as a string': await sign({ ...legacy, admin: 'true' }, TEST_ADMIN_JWT_SECRET),
    'legacy without userId': await sign({ admin: true, iat: now(), exp: now() + 3600 }, TEST_ADMIN_JWT_SECRET),
    'legacy expired': await sign({ ...legacy, iat: now() - 90_000, exp: now() - 3600 }, TEST_ADMIN_JWT_SECRET),
    'legacy wrong key': await sign(legacy, otherSecret),
    'RS256 header over an HS256 signature': rs256HeaderHmacSignature(liveClaims(live), TEST_JWT_SECRET),
  };
}

/** The attacks refused for their expiry alone: jose checks the time claims after the signature, and before our own checks. */
const EXPIRED_ATTACKS = new Set(['expired', 'expired, with a session id that is no UUID', 'legacy expired']);

describe('token attacks on every protected route', () => {
  let app: FastifyInstance;
  /** The app's error lines: a failure below shows why an answer was not 401. */
  let errors: string[];
  let routes: { method: string; url: string }[];
  let tokens: Record<string, string | undefined>;
  let live: LiveSession;
  const database = usePrivateDatabase('attacks');

  beforeAll(async () => {
    ({ app, lines: errors } = await buildTestAppWithLog({ DATABASE_URL: database.url }, 'error'));
    const user = await createAuthUser(database.sql);
    live = { sub: user.id, session_id: await openSession(database.sql, user.id) };
    tokens = await attacks(live);
    const document = app.swagger() as { paths: Record<string, Record<string, { security?: Record<string, unknown>[] }>> };
    routes = [];
    for (const [path, item] of Object.entries(document.paths)) {
      for (const [method, operation] of Object.entries(item)) {
        if (!operation.security?.some((scheme) => 'bearer' in scheme)) continue;
        // Path parameters get well-formed values, so only the token is wrong.
        routes.push({ method: method.toUpperCase(), url: path.replace(/\{[^}]+\}/g, crypto.randomUUID()).replace(/\/$/, '') });
      }
    }
  });
  afterAll(async () => app?.close());

  it('finds the protected routes', () => {
    expect(routes.length).toBeGreaterThanOrEqual(20);
  });

  it("lets the live session's own token through: the refusals below are the tokens' own", async () => {
    const response = await app.inject({ method: 'GET', url: '/api/users/me', headers: { authorization: `Bearer ${await sign(liveClaims(live), TEST_JWT_SECRET)}` } });
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json().data.id).toBe(live.sub);
  });

  it('refuses every attack token on every one of them with 401', async () => {
    const admitted: string[] = [];
    for (const route of routes) {
      for (const [attack, token] of Object.entries(tokens)) {
        // An expired token of ours signs its session out (docs/accounts.md): the last test below, as it ends the live session.
        if (route.url === '/api/auth/signout' && attack === 'expired') continue;
        const response = await app.inject({
          method: route.method as 'GET',
          url: route.url,
          headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
          ...(route.method === 'GET' || route.method === 'DELETE' ? {} : { payload: {} }),
        });
        if (response.statusCode !== 401) {
          admitted.push(`${route.method} ${route.url} with ${attack}: ${response.statusCode} ${response.body.slice(0, 200)}`);
          continue;
        }
        const body = response.json();
        expect(body.success).toBe(false);
        expect(body.statusCode).toBe(401);
        // Sign-out answers every caller it cannot sign out alike.
        expect(body.error, `${route.method} ${route.url} with ${attack}`).toBe(route.url === '/api/auth/signout' ? 'No active session' : 'Authentication required');
        // RFC 6750's challenge: none came, it expired (refresh), or it is refused for good (sign in). Sign-out takes an expired token of ours.
        const expired = EXPIRED_ATTACKS.has(attack) && route.url !== '/api/auth/signout';
        const challenge = token === undefined ? BEARER_CHALLENGES.missing : expired ? BEARER_CHALLENGES.expired : BEARER_CHALLENGES.invalid;
        expect(response.headers['www-authenticate'], `${route.method} ${route.url} with ${attack}`).toBe(challenge);
      }
    }
    expect(admitted, errors.join('')).toEqual([]);
  });

  it('an expired token of the live session signs it out, as designed, and its session is then refused', async () => {
    const signOut = await app.inject({ method: 'POST', url: '/api/auth/signout', headers: { authorization: `Bearer ${tokens.expired}` }, payload: {} });
    expect(signOut.json()).toEqual({ success: true, message: 'Signed out successfully' });
    const after = await app.inject({ method: 'GET', url: '/api/users/me', headers: { authorization: `Bearer ${await sign(liveClaims(live), TEST_JWT_SECRET)}` } });
    expect(after.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
  });

  it("refuses any claims signed with the project's key that name no live session with 401, on every route: never a 5xx", { timeout: 120_000 }, async () => {
    // Only the key's holder can sign these; they stand for a mis-minted token. Every
    // claim may be missing, well-formed or of another type; none names a session that exists.
    const anyOf = <T>(valid: fc.Arbitrary<T>) => fc.option(fc.oneof(valid, fc.string(), fc.integer(), fc.boolean(), fc.constant(null), fc.anything()), { nil: undefined });
    const claims = fc.record(
      {
        sub: anyOf(fc.uuid()),
        session_id: anyOf(fc.uuid()),
        aud: anyOf(fc.constantFrom('authenticated', ['authenticated'], ['authenticated', 'anon'])),
        role: anyOf(fc.constantFrom('authenticated', 'service_role', 'anon', 'supabase_admin')),
        exp: anyOf(fc.integer({ min: now() + 60, max: now() + 7200 })),
        iat: anyOf(fc.integer({ min: now() - 3600, max: now() })),
        email: anyOf(fc.emailAddress()),
        app_metadata: fc.option(fc.anything(), { nil: undefined }),
        admin: fc.option(fc.anything(), { nil: undefined }),
        userId: fc.option(fc.anything(), { nil: undefined }),
      },
      { requiredKeys: [] },
    );
    const admitted: string[] = [];
    await fc.assert(
      fc.asyncProperty(claims, fc.constantFrom(...routes), async (payload, route) => {
        const defined = Object.fromEntries(Object.entries(payload).filter(([, value]) => value !== undefined));
        const token = hmacSigned('HS256', defined, TEST_JWT_SECRET);
        const response = await app.inject({
          method: route.method as 'GET',
          url: route.url,
          headers: { authorization: `Bearer ${token}` },
          ...(route.method === 'GET' || route.method === 'DELETE' ? {} : { payload: {} }),
        });
        const body = response.json();
        if (response.statusCode !== 401 || body.success !== false || !['Authentication required', 'No active session'].includes(body.error)) {
          admitted.push(`${route.method} ${route.url} with ${JSON.stringify(defined)}: ${response.statusCode} ${response.body.slice(0, 200)}`);
        }
      }),
      { numRuns: 1_500 },
    );
    expect(admitted, errors.join('')).toEqual([]);
  });
});
