import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import { describe, expect, it } from 'vitest';
import { createTokenVerifier, InvalidTokenError, signLegacyAdminToken } from './tokens.ts';

// The verifier remembers tokens that verified (by their exact text); what it
// remembers must never outlive the token, and nothing else may be remembered.

const secret = randomBytes(32).toString('hex');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a remembered token', () => {
  it('is refused once it has expired (past the 5 s clock tolerance), though it was accepted before', async () => {
    const verify = createTokenVerifier({ adminJwtSecret: secret });
    const token = await signLegacyAdminToken(secret, 'admin-1', '1s');
    expect(await verify(token)).toMatchObject({ kind: 'legacy-admin', claims: { userId: 'admin-1' } });
    expect(await verify(token)).toMatchObject({ kind: 'legacy-admin', claims: { userId: 'admin-1' } });
    await sleep(6_500);
    await expect(verify(token)).rejects.toBeInstanceOf(InvalidTokenError);
  }, 15_000);

  it('does not vouch for another text: a changed signature or payload is verified, and refused', async () => {
    const verify = createTokenVerifier({ adminJwtSecret: secret });
    const token = await signLegacyAdminToken(secret, 'admin-2');
    await verify(token);
    const [header, payload, signature] = token.split('.');
    const otherSignature = `${header}.${payload}.${signature.slice(0, -2)}${signature.endsWith('AA') ? 'BB' : 'AA'}`;
    await expect(verify(otherSignature)).rejects.toBeInstanceOf(InvalidTokenError);
    const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
    const otherPayload = `${header}.${Buffer.from(JSON.stringify({ ...claims, userId: 'someone-else' })).toString('base64url')}.${signature}`;
    await expect(verify(otherPayload)).rejects.toBeInstanceOf(InvalidTokenError);
    // The original is still accepted, and its claims cannot be changed by a caller.
    const again = await verify(token);
    expect(again.claims.userId).toBe('admin-2');
    expect(Object.isFrozen(again.claims)).toBe(true);
  });

  it('is refused by a verifier with another secret (memory is per verifier)', async () => {
    const token = await signLegacyAdminToken(secret, 'admin-3');
    await createTokenVerifier({ adminJwtSecret: secret })(token);
    await expect(createTokenVerifier({ adminJwtSecret: randomBytes(32).toString('hex') })(token)).rejects.toBeInstanceOf(InvalidTokenError);
  });
});

describe('a user session token', () => {
  it("runs as `authenticated` whatever `role` it carries: the database role is that, and auth.role() must agree", async () => {
    // The auth server's admin API may set a user's role (service_role, say); auth.role() reads the claim,
    // and a function trusting auth.role() = 'service_role' would have let that user past it.
    const verify = createTokenVerifier({ jwtSecret: secret });
    for (const role of ['service_role', 'supabase_admin', 'authenticated']) {
      const token = await new SignJWT({ role, aud: 'authenticated', session_id: crypto.randomUUID() })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(crypto.randomUUID())
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(secret));
      const verified = await verify(token);
      expect(verified.kind).toBe('supabase');
      expect(verified.claims.role, role).toBe('authenticated');
    }
  });

  it('is refused when its user or session is not named by a UUID, as the auth server names them', async () => {
    const verify = createTokenVerifier({ jwtSecret: secret });
    const token = (sub: string, sessionId: string) =>
      new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: sessionId })
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject(sub)
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(secret));
    const [user, session] = [crypto.randomUUID(), crypto.randomUUID()];
    expect((await verify(await token(user, session))).claims).toMatchObject({ sub: user, session_id: session });
    for (const [sub, sessionId] of [['admin', session], [user, 'bench'], [`${user} `, session], [user, `${session}0`], ['', session]]) {
      await expect(verify(await token(sub, sessionId)), `${sub} / ${sessionId}`).rejects.toBeInstanceOf(InvalidTokenError);
    }
  });
});

describe('an expired user token, for sign-out', () => {
  const hourAgo = () => Math.floor(Date.now() / 1000) - 3600;
  const userToken = (claims: Record<string, unknown>, key = secret) =>
    new SignJWT({ role: 'authenticated', aud: 'authenticated', sub: crypto.randomUUID(), session_id: crypto.randomUUID(), iat: hourAgo() - 3600, exp: hourAgo(), ...claims })
      .setProtectedHeader({ alg: 'HS256' })
      .sign(new TextEncoder().encode(key));

  it('gives its user and session when only its expiry is past; the ordinary check refuses it', async () => {
    const verifier = createTokenVerifier({ jwtSecret: secret });
    const [sub, sessionId] = [crypto.randomUUID(), crypto.randomUUID()];
    const token = await userToken({ sub, session_id: sessionId });
    await expect(verifier(token)).rejects.toBeInstanceOf(InvalidTokenError);
    expect(await verifier.verifyExpiredUserToken(token)).toMatchObject({ sub, session_id: sessionId });
  });

  it('is refused when anything but the expiry is wrong, or when it has not expired', async () => {
    const verifier = createTokenVerifier({ jwtSecret: secret, adminJwtSecret: secret });
    const refused = [
      await userToken({}, randomBytes(32).toString('hex')), // another key
      await userToken({ aud: 'anon' }),
      await userToken({ session_id: undefined }),
      await userToken({ sub: undefined }),
      await userToken({ exp: Math.floor(Date.now() / 1000) + 3600 }), // still valid: the ordinary check is for it
      await userToken({ exp: undefined }),
      await userToken({ session_id: 'not-a-uuid' }),
      await userToken({ sub: 'not-a-uuid' }),
      // A legacy admin token has no session to end.
      await new SignJWT({ admin: true, userId: 'admin-4', iat: hourAgo() - 60, exp: hourAgo() }).setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode(secret)),
      'not.a.token',
    ];
    for (const [index, token] of refused.entries()) {
      await expect(verifier.verifyExpiredUserToken(token), `token ${index}`).rejects.toBeInstanceOf(InvalidTokenError);
    }
  });
});
