import type { webcrypto } from 'node:crypto';
import { createRemoteJWKSet, decodeJwt, decodeProtectedHeader, type JWTPayload, jwtVerify, SignJWT } from 'jose';
import { LRUCache } from 'lru-cache';
import { errorCode } from './errors.ts';
import { isUuidText } from './schemas.ts';

// Access tokens are verified here, locally, without a call to the auth
// server: HS256 with the project's JWT secret, or an asymmetric key from the
// auth server's JWKS when it publishes one. jose refuses `alg: none` and any
// algorithm not listed.

export const LEGACY_ADMIN_TOKEN_TTL = '24h';
/** SPEC 5.5: the legacy token lives 24 hours; a longer-lived one is refused. */
export const LEGACY_ADMIN_TOKEN_MAX_LIFETIME_S = 24 * 3600;
const CLOCK_TOLERANCE_S = 5;
/**
 * A token that verified is remembered, by its exact text, for at most this
 * long and never past its own expiry: a front end sends the same access token
 * with every request for up to an hour, and each verification cost about 80
 * µs of WebCrypto (docs/performance.md). Only what verified is kept; sign-out
 * is still seen, because the session is checked on every request (plugins/auth.ts).
 */
const VERIFIED_TTL_MS = 60_000;
const VERIFIED_MAX = 5_000;
const ASYMMETRIC = ['ES256', 'RS256', 'EdDSA'] as const;

export class InvalidTokenError extends Error {}

/**
 * A token that would be accepted but for its expiry (`exp`, or a legacy
 * token's `iat` past 24 hours): a user's client can refresh and retry, where
 * any other refusal sends it back to sign in (plugins/auth.ts says which in
 * WWW-Authenticate).
 */
export class ExpiredTokenError extends InvalidTokenError {}

/**
 * An HS256 token whose signature did not verify with the project's secret.
 * `issuer` is its unverified `iss`: when that is our own auth server, the
 * likelier cause is a SUPABASE_JWT_SECRET that is not the project's
 * (plugins/auth.ts says so in the log), not a forgery.
 */
export class SignatureMismatchError extends InvalidTokenError {
  readonly issuer: unknown;

  constructor(message: string, issuer: unknown) {
    super(message);
    this.issuer = issuer;
  }
}

/**
 * An HS256 token, and no project JWT secret to check it with. `issuer` is its
 * unverified `iss`: when that is our own auth server, the project signs with
 * its legacy secret and SUPABASE_JWT_SECRET was left unset (plugins/auth.ts
 * says so in the log); every user's token is then refused.
 */
export class SecretMissingError extends InvalidTokenError {
  readonly issuer: unknown;

  constructor(issuer: unknown) {
    super('HS256 tokens are not accepted: no JWT secret configured');
    this.issuer = issuer;
  }
}

/** The auth server's JWKS could not be fetched: nothing is known about the token (503, not 401). */
export class KeySourceUnavailableError extends Error {}

// jose's codes for a JWKS that could not be had, as opposed to a token that failed against it.
const KEY_SOURCE_FAILURES = new Set(['ERR_JWKS_TIMEOUT', 'ERR_JWKS_INVALID', 'ERR_JOSE_GENERIC']);

function isKeySourceFailure(error: unknown): boolean {
  const code = errorCode(error);
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
  /** The project's anon key, sent as `apikey` as supabase-js does: a gateway in front of the auth server may refuse a request without it. */
  anonKey?: string;
  /** Secret of the legacy admin token (SPEC 5.5). */
  adminJwtSecret?: string;
}

export type VerifiedToken =
  | { kind: 'supabase'; claims: SupabaseClaims }
  | { kind: 'legacy-admin'; claims: LegacyAdminClaims };

const encoder = new TextEncoder();

/** An HS256 secret as a CryptoKey made once (given the raw bytes, jose imports the key again on every verification). */
function hmacKey(secret: string): Promise<webcrypto.CryptoKey> {
  return crypto.subtle.importKey('raw', encoder.encode(secret), { name: 'HMAC', hash: 'SHA-256' }, false, ['verify']);
}

export function createTokenVerifier(options: TokenVerifierOptions) {
  const hsKey = options.jwtSecret ? hmacKey(options.jwtSecret) : undefined;
  const adminKey = options.adminJwtSecret ? hmacKey(options.adminJwtSecret) : undefined;
  const verified = new LRUCache<string, VerifiedToken>({ max: VERIFIED_MAX, ttl: VERIFIED_TTL_MS });
  const jwks = options.supabaseUrl
    ? createRemoteJWKSet(new URL('auth/v1/.well-known/jwks.json', options.supabaseUrl.replace(/\/?$/, '/')), {
        cooldownDuration: 30_000,
        cacheMaxAge: 10 * 60_000,
        ...(options.anonKey ? { headers: { apikey: options.anonKey } } : {}),
      })
    : undefined;

  /**
   * `asOf`: the moment the token's time claims are checked against (now unless given).
   * The auth server names users and sessions by UUID. A token signed with the
   * project's key that names them otherwise (only the key's holder could make
   * one) is refused: the session check casts both to uuid, and that failure
   * was answered as the database being unavailable (503).
   */
  async function verifySupabase(token: string, alg: string, asOf?: Date): Promise<SupabaseClaims> {
    const payload = await verifySupabaseSignature(token, alg, asOf);
    if (!isUuidText(payload.sub) || !isUuidText(payload.session_id)) throw new InvalidTokenError('sub and session_id must be UUIDs');
    return payload as SupabaseClaims;
  }

  async function verifySupabaseSignature(token: string, alg: string, asOf?: Date): Promise<JWTPayload> {
    // Every access token of a signed-in user names its session; one that does
    // not cannot be checked against auth.sessions, so it is not accepted.
    const common = { audience: 'authenticated', clockTolerance: CLOCK_TOLERANCE_S, requiredClaims: ['sub', 'exp', 'session_id'], currentDate: asOf };
    if (alg === 'HS256') {
      if (!hsKey) throw new InvalidTokenError('HS256 tokens are not accepted: no JWT secret configured');
      return (await jwtVerify(token, await hsKey, { ...common, algorithms: ['HS256'] })).payload;
    }
    if ((ASYMMETRIC as readonly string[]).includes(alg) && jwks) {
      try {
        return (await jwtVerify(token, jwks, { ...common, algorithms: [...ASYMMETRIC] })).payload;
      } catch (error) {
        if (isKeySourceFailure(error)) throw new KeySourceUnavailableError((error as Error).message);
        throw error;
      }
    }
    throw new InvalidTokenError(`algorithm ${alg} is not accepted`);
  }

  async function verifyLegacyAdmin(token: string): Promise<LegacyAdminClaims> {
    if (!adminKey) throw new InvalidTokenError('legacy admin tokens are not accepted: no ADMIN_JWT_SECRET configured');
    const { payload } = await jwtVerify(token, await adminKey, {
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

  /** The token's algorithm and its claims, unverified; InvalidTokenError when it is no JWT. */
  function decodeUnverified(token: string): { alg: string; unverified: JWTPayload } {
    try {
      return { alg: decodeProtectedHeader(token).alg ?? '', unverified: decodeJwt(token) };
    } catch {
      throw new InvalidTokenError('malformed token');
    }
  }

  /** Verifies a bearer token of either kind; throws InvalidTokenError when it is not acceptable. */
  async function verifyToken(token: string): Promise<VerifiedToken> {
    const { alg, unverified } = decodeUnverified(token);
    try {
      // The unverified claims only choose which key must verify the token.
      if ('admin' in unverified && !('session_id' in unverified)) {
        return { kind: 'legacy-admin', claims: await verifyLegacyAdmin(token) };
      }
      if (alg === 'HS256' && !hsKey) throw new SecretMissingError(unverified.iss);
      const claims = await verifySupabase(token, alg);
      // A user's requests run as the database role `authenticated` (plugins/auth.ts), and
      // auth.role() reads this claim: it must say so, whatever role the auth server's admin API
      // gave the user (service_role would have passed a check of auth.role() = 'service_role').
      return { kind: 'supabase', claims: claims.role === 'authenticated' ? claims : { ...claims, role: 'authenticated' } };
    } catch (error) {
      if (error instanceof InvalidTokenError || error instanceof KeySourceUnavailableError) throw error;
      // jose checks the signature before the time claims: an expired token here is otherwise genuine.
      if (errorCode(error) === 'ERR_JWT_EXPIRED') throw new ExpiredTokenError((error as Error).message);
      if (alg === 'HS256' && errorCode(error) === 'ERR_JWS_SIGNATURE_VERIFICATION_FAILED') {
        throw new SignatureMismatchError((error as Error).message, unverified.iss);
      }
      throw new InvalidTokenError((error as Error).message);
    }
  }

  /** verifyToken, answered from memory for a token that verified in the last minute and has not expired since. */
  async function verify(token: string): Promise<VerifiedToken> {
    const known = verified.get(token);
    if (known) return known;
    const result = await verifyToken(token);
    // Frozen: every request with this token shares the one claims object.
    Object.freeze(result.claims);
    const untilExpiryMs = (result.claims.exp as number) * 1000 - Date.now();
    if (untilExpiryMs > 0) verified.set(token, result, { ttl: Math.min(VERIFIED_TTL_MS, untilExpiryMs) });
    return result;
  }

  /**
   * The claims of a user's access token that has expired and is otherwise
   * one verifyToken accepts (signature, audience, sub, session_id: a legacy
   * admin token has neither audience nor session): checked as of a second
   * before its expiry. Sign-out takes it, to end the session
   * it names; nothing else does. InvalidTokenError for any other token, one
   * that has not expired included; KeySourceUnavailableError as verifyToken.
   */
  async function verifyExpiredUserToken(token: string): Promise<SupabaseClaims> {
    const { alg, unverified } = decodeUnverified(token);
    const exp = unverified.exp;
    if (typeof exp !== 'number' || exp * 1000 > Date.now()) throw new InvalidTokenError('not an expired token');
    try {
      return await verifySupabase(token, alg, new Date((exp - 1) * 1000));
    } catch (error) {
      if (error instanceof InvalidTokenError || error instanceof KeySourceUnavailableError) throw error;
      throw new InvalidTokenError((error as Error).message);
    }
  }

  return Object.assign(verify, { verifyExpiredUserToken });
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
