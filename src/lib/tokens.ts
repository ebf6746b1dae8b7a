import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, type JWTPayload, jwtVerify, SignJWT } from 'jose';

// Access tokens are verified here, locally, without a call to the auth
// server: HS256 with the project's JWT secret, or an asymmetric key from the
// auth server's JWKS when it publishes one. jose refuses `alg: none` and any
// algorithm not listed.

export const LEGACY_ADMIN_TOKEN_TTL = '24h';
/** SPEC 5.5: the legacy token lives 24 hours; a longer-lived one is refused. */
export const LEGACY_ADMIN_TOKEN_MAX_LIFETIME_S = 24 * 3600;
const CLOCK_TOLERANCE_S = 5;
const ASYMMETRIC = ['ES256', 'RS256', 'EdDSA'] as const;

export class InvalidTokenError extends Error {}

/** The auth server's JWKS could not be fetched: nothing is known about the token (503, not 401). */
export class KeySourceUnavailableError extends Error {}

// jose's codes for a JWKS that could not be had, as opposed to a token that failed against it.
const KEY_SOURCE_FAILURES = new Set(['ERR_JWKS_TIMEOUT', 'ERR_JWKS_INVALID', 'ERR_JOSE_GENERIC']);

function isKeySourceFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  // No jose code at all: the fetch itself failed (connection refused, reset, aborted).
  if (typeof code !== 'string' || !code.startsWith('ERR_J')) return true;
  return KEY_SOURCE_FAILURES.has(code);
}

export interface SupabaseClaims extends JWTPayload {
  sub: string;
  role?: string;
  email?: string;
  session_id: string;
}

export interface LegacyAdminClaims extends JWTPayload {
  admin: true;
  userId: string;
}

export interface TokenVerifierOptions {
  /** The project's JWT secret (HS256). */
  jwtSecret?: string;
  /** Base URL of the Supabase project; its JWKS serves asymmetric keys. */
  supabaseUrl?: string;
  /** Secret of the legacy admin token (SPEC 5.5). */
  adminJwtSecret?: string;
}

export type VerifiedToken =
  | { kind: 'supabase'; claims: SupabaseClaims }
  | { kind: 'legacy-admin'; claims: LegacyAdminClaims };

const encoder = new TextEncoder();

export function createTokenVerifier(options: TokenVerifierOptions) {
  const hsKey = options.jwtSecret ? encoder.encode(options.jwtSecret) : undefined;
  const adminKey = options.adminJwtSecret ? encoder.encode(options.adminJwtSecret) : undefined;
  const jwks = options.supabaseUrl
    ? createRemoteJWKSet(new URL('auth/v1/.well-known/jwks.json', options.supabaseUrl.replace(/\/?$/, '/')), {
        cooldownDuration: 30_000,
        cacheMaxAge: 10 * 60_000,
      })
    : undefined;

  async function verifySupabase(token: string, alg: string): Promise<SupabaseClaims> {
    // Every access token of a signed-in user names its session; one that does
    // not cannot be checked against auth.sessions, so it is not accepted.
    const common = { audience: 'authenticated', clockTolerance: CLOCK_TOLERANCE_S, requiredClaims: ['sub', 'exp', 'session_id'] };
    if (alg === 'HS256') {
      if (!hsKey) throw new InvalidTokenError('HS256 tokens are not accepted: no JWT secret configured');
      return (await jwtVerify(token, hsKey, { ...common, algorithms: ['HS256'] })).payload as SupabaseClaims;
    }
    if ((ASYMMETRIC as readonly string[]).includes(alg) && jwks) {
      try {
        return (await jwtVerify(token, jwks, { ...common, algorithms: [...ASYMMETRIC] })).payload as SupabaseClaims;
      } catch (error) {
        if (isKeySourceFailure(error)) throw new KeySourceUnavailableError((error as Error).message);
        throw error;
      }
    }
    throw new InvalidTokenError(`algorithm ${alg} is not accepted`);
  }

  async function verifyLegacyAdmin(token: string): Promise<LegacyAdminClaims> {
    if (!adminKey) throw new InvalidTokenError('legacy admin tokens are not accepted: no ADMIN_JWT_SECRET configured');
    const { payload } = await jwtVerify(token, adminKey, {
      algorithms: ['HS256'],
      clockTolerance: CLOCK_TOLERANCE_S,
      // jose checks that iat is a number and not in the future (beyond the tolerance).
      requiredClaims: ['exp', 'iat'],
      maxTokenAge: LEGACY_ADMIN_TOKEN_MAX_LIFETIME_S,
    });
    // A token signed to live for years would stay an admin credential for years once leaked.
    if ((payload.exp as number) - (payload.iat as number) > LEGACY_ADMIN_TOKEN_MAX_LIFETIME_S + CLOCK_TOLERANCE_S) {
      throw new InvalidTokenError('legacy token lives longer than 24 hours');
    }
    if (payload.admin !== true || typeof payload.userId !== 'string' || payload.userId === '') {
      throw new InvalidTokenError('legacy token does not carry admin: true and a userId');
    }
    return payload as LegacyAdminClaims;
  }

  /** Verifies a bearer token of either kind; throws InvalidTokenError when it is not acceptable. */
  return async function verify(token: string): Promise<VerifiedToken> {
    let alg: string;
    let unverified: JWTPayload;
    try {
      alg = decodeProtectedHeader(token).alg ?? '';
      unverified = decodeJwt(token);
    } catch {
      throw new InvalidTokenError('malformed token');
    }
    try {
      // The unverified claims only choose which key must verify the token.
      if ('admin' in unverified && !('session_id' in unverified)) {
        return { kind: 'legacy-admin', claims: await verifyLegacyAdmin(token) };
      }
      return { kind: 'supabase', claims: await verifySupabase(token, alg) };
    } catch (error) {
      if (error instanceof InvalidTokenError || error instanceof KeySourceUnavailableError) throw error;
      throw new InvalidTokenError((error as Error).message);
    }
  };
}

export type TokenVerifier = ReturnType<typeof createTokenVerifier>;

/** Signs a legacy admin token (SPEC 5.5): HS256, `admin: true`, `userId`, 24 h. */
export async function signLegacyAdminToken(secret: string, userId: string, expiresIn = LEGACY_ADMIN_TOKEN_TTL): Promise<string> {
  return new SignJWT({ admin: true, userId })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuedAt()
    .setExpirationTime(expiresIn)
    .sign(encoder.encode(secret));
}
