import type { FastifyInstance, InjectOptions } from 'fastify';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, expect } from 'vitest';
import type postgres from 'postgres';
import { signLegacyAdminToken } from '../../src/lib/tokens.ts';
import type { AppRole } from '../../src/lib/roles.ts';
import type { Caller } from '../../src/plugins/auth.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './app.ts';
import { createAuthUser, grantRole, openSession } from './db.ts';

// Tokens an admin route must refuse with 401, for the administration tests:
// none, garbage, a legacy admin token signed with another secret, an expired
// one, and a Supabase-shaped token signed with another project's secret.

const encoder = new TextEncoder();

export async function refusedTokens(): Promise<{ label: string; authorization?: string }[]> {
  const otherSecret = encoder.encode('not-this-projects-secret-0123456789abcdef');
  const forgedUser = await new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: crypto.randomUUID() })
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(crypto.randomUUID())
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(otherSecret);
  const expiredLegacy = await new SignJWT({ admin: true, userId: 'x' })
    .setProtectedHeader({ alg: 'HS256' })
    .setIssuedAt(Math.floor(Date.now() / 1000) - 25 * 3600)
    .setExpirationTime(Math.floor(Date.now() / 1000) - 3600)
    .sign(encoder.encode(TEST_ADMIN_JWT_SECRET));
  return [
    { label: 'no token' },
    { label: 'garbage', authorization: 'Bearer not-a-jwt' },
    { label: 'forged legacy admin token', authorization: `Bearer ${await signLegacyAdminToken('not-the-admin-secret-0123456789abcdef', 'x')}` },
    { label: 'expired legacy admin token', authorization: `Bearer ${expiredLegacy}` },
    { label: 'forged user token', authorization: `Bearer ${forgedUser}` },
  ];
}

/** Every refused token gets 401 `Authentication required` from `request`. */
export async function expectRefused(app: FastifyInstance, request: InjectOptions): Promise<void> {
  for (const { label, authorization } of await refusedTokens()) {
    const response = await app.inject({ ...request, headers: { ...request.headers, ...(authorization ? { authorization } : {}) } });
    expect(response.statusCode, `${request.method} ${request.url} with ${label}`).toBe(401);
    expect(response.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
  }
}

export async function legacyAdmin(userId: string = crypto.randomUUID()): Promise<{ authorization: string }> {
  return { authorization: `Bearer ${await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, userId)}` };
}

/**
 * What most admin test files start with: an app and the legacy admin's
 * headers, made before the file's tests and handed to `receive`; after them
 * the app is closed and the file's `sql` ended.
 */
export function useAdminApp(sql: { end(): Promise<unknown> }, receive: (built: { app: FastifyInstance; admin: { authorization: string } }) => void): void {
  let app: FastifyInstance | undefined;
  beforeAll(async () => {
    app = await buildTestApp();
    receive({ app, admin: await legacyAdmin() });
  });
  afterAll(async () => {
    await app?.close();
    await sql.end();
  });
}

/** A signed-in user holding `roles` (none by default): an open session, and a token for it as the auth server signs one. */
export async function signedInUser(sql: postgres.Sql, roles: AppRole[] = []): Promise<{ id: string; caller: Caller; authorization: string }> {
  const user = await createAuthUser(sql);
  for (const role of roles) await grantRole(sql, user.id, role);
  const sessionId = await openSession(sql, user.id);
  const claims = { sub: user.id, role: 'authenticated', aud: 'authenticated', session_id: sessionId };
  const token = await new SignJWT(claims)
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(new TextEncoder().encode(TEST_JWT_SECRET));
  const caller: Caller = { kind: 'user', userId: user.id, sessionId, roles, claims };
  return { id: user.id, caller, authorization: `Bearer ${token}` };
}

/** A signed-in user with the admin role. */
export const signedInAdmin = (sql: postgres.Sql) => signedInUser(sql, ['admin']);
