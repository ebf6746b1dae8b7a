import type { FastifyBaseLogger, FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { LRUCache } from 'lru-cache';
import type { Config } from '../config.ts';
import { AppError, bearerChallengeOf, credentialsRefused, forbidden, fromPostgresError, serviceUnavailable, withBearerChallenge } from '../lib/errors.ts';
import type { AppRole } from '../lib/roles.ts';
import { createTokenVerifier, ExpiredTokenError, InvalidTokenError, KeySourceUnavailableError, SecretMissingError, SignatureMismatchError, type SupabaseClaims } from '../lib/tokens.ts';
import { type DbActor, ELEVATED_ACTOR, type ElevatedSql } from './db.ts';

// One auth context per request. Guards refuse early: 401 for who-are-you,
// 403 for not-allowed; row-level security then decides again in Postgres.
// Words: a Caller is who called over HTTP; a DbActor is what their SQL runs as.

/** Who called over HTTP: a signed-in user, or the holder of a legacy admin token. */
export type Caller =
  | { kind: 'user'; userId: string; email?: string; sessionId: string; roles: AppRole[]; claims: SupabaseClaims }
  | { kind: 'legacy-admin'; userId: string; roles: ['admin'] };

declare module 'fastify' {
  interface FastifyRequest {
    caller: Caller | null;
  }
  interface FastifyInstance {
    /** Resolves the caller from the Bearer token, or throws 401 (503 when sessions cannot be checked). */
    authenticate(request: FastifyRequest): Promise<Caller>;
    /** Any signed-in user (a Supabase session); the legacy admin token is not a user. */
    requireUser: onRequestHookHandler;
    /** A signed-in user holding one of `roles`, or, where `roles` has admin, the legacy admin token. */
    requireRole(...roles: readonly AppRole[]): onRequestHookHandler;
    /** The caller a token stands for, or throws 401 / 503; `fresh` skips the session cache (long-lived streams re-check with it). */
    callerFromToken(token: string, log: FastifyBaseLogger, options?: { fresh?: boolean }): Promise<Caller>;
    /** Forgets a cached session at once (this instance signed it out). */
    forgetSession(sessionId: string): void;
    /** Forgets every cached session of a user at once (this instance ended them all: a password reset). */
    forgetUserSessions(userId: string): void;
    /**
     * The user and session an access token of ours names, expired or not (its
     * signature verified), or null for any other token; 503 when the signing
     * keys cannot be fetched. For sign-out alone: the session may well have
     * ended already.
     */
    sessionOfToken(token: string, log: FastifyBaseLogger): Promise<{ userId: string; sessionId: string } | null>;
  }
}

/** The database actor (role and claims) a caller's queries run as; services call it, never routes. */
export function dbActorOf(caller: Caller | null): DbActor {
  if (!caller) return { role: 'anon' };
  // The legacy token is a server-issued admin credential with no auth.users
  // session behind it, so its requests use the service role.
  if (caller.kind === 'legacy-admin') return ELEVATED_ACTOR;
  return { role: 'authenticated', claims: caller.claims };
}

/** The database actor of a user known so far only by id (a sign-in before it is a Caller). */
export function dbActorOfUser(userId: string): DbActor {
  return { role: 'authenticated', claims: { sub: userId, role: 'authenticated', aud: 'authenticated' } };
}

export function bearerToken(request: FastifyRequest): string | undefined {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return undefined;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match?.[1];
}

/** Whether the caller holds the admin role (the legacy admin token does). */
export const isAdmin = (caller: Caller): boolean => caller.roles.includes('admin');

/** Whether the caller holds at least one of `roles`. */
export const hasAnyRole = (caller: Caller | null, roles: readonly AppRole[]): boolean =>
  caller !== null && caller.roles.some((role) => roles.includes(role));

/** Guard for routes open to any authenticated caller (a user session or the legacy admin token); 401 otherwise. */
export function requireCaller(app: FastifyInstance) {
  return async function requireCaller(request: FastifyRequest) {
    await app.authenticate(request);
  };
}

/** The caller a guard has established; routes behind a guard always have one. */
export function callerOf(request: FastifyRequest): Caller {
  if (!request.caller) throw new Error('route has no auth guard');
  return request.caller;
}

/**
 * Runs `work`, a read or change of the user `userId`. When that is the
 * signed-in caller and it is not found (404), the account was deleted in the
 * seconds its session stays cached: its token, asked afresh, is refused with
 * 401, which sends a front end back to sign in, where 404 left it stuck.
 */
export async function aboutUser<T>(app: FastifyInstance, request: FastifyRequest, userId: string, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (error) {
    const ownAccount = request.caller?.kind === 'user' && request.caller.userId === userId;
    if (ownAccount && error instanceof AppError && error.statusCode === 404) {
      await app.callerFromToken(bearerToken(request) ?? '', request.log, { fresh: true });
    }
    throw error;
  }
}

/** Elevated (there is no caller yet): is the session open (or `known` so), and which roles does its user hold? */
function selectSessionStateElevated(sql: ElevatedSql, userId: string, sessionId: string, known: boolean) {
  return sql<{ active: boolean; roles: AppRole[] }[]>`
    select
      ${known}::boolean or public.session_is_open(${userId}::uuid, ${sessionId}::uuid) as active,
      coalesce((select array_agg(role::text order by role) from public.user_roles where user_id = ${userId}::uuid), '{}') as roles`;
}

/** How long a user token that verified shows the JWT secret to be the project's: the wrong-secret warning below keeps quiet meanwhile. */
const SECRET_PROVEN_FOR_MS = 10 * 60_000;

export interface AuthPluginOptions {
  config: Config;
  /** How long (positive, in ms) a session found alive is trusted before asking the database again. */
  sessionCacheMs?: number;
  /** Most sessions remembered as alive at once. */
  sessionCacheMax?: number;
}

/** A warning logged at most once a minute, however often its cause comes back (each user's request, say). */
function warnOncePerMinute(message: string): (log: FastifyBaseLogger) => void {
  let warnedAt = Number.NEGATIVE_INFINITY;
  return (log) => {
    if (Date.now() - warnedAt < 60_000) return;
    warnedAt = Date.now();
    log.warn(message);
  };
}

export default fp<AuthPluginOptions>(
  async function authPlugin(app: FastifyInstance, { config, sessionCacheMs = 5_000, sessionCacheMax = 10_000 }) {
    const verify = createTokenVerifier({
      jwtSecret: config.SUPABASE_JWT_SECRET,
      supabaseUrl: config.SUPABASE_URL,
      anonKey: config.SUPABASE_ANON_KEY,
      adminJwtSecret: config.LEGACY_ADMIN_TOKEN === 'on' ? config.ADMIN_JWT_SECRET : undefined,
    });
    // Production refuses to start so (config-production.ts); elsewhere (npm run dev against a hosted
    // project, say) every legacy token was refused with nothing in the log to say why.
    if (config.LEGACY_ADMIN_TOKEN === 'on' && !config.ADMIN_JWT_SECRET) {
      app.log.warn('ADMIN_JWT_SECRET is not set: legacy admin tokens (npm run admin-token) are all refused (401); set it, or LEGACY_ADMIN_TOKEN=off');
    }
    // Sessions seen open (session id → its user), each trusted for sessionCacheMs. Bounded: a
    // flood of distinct valid sessions cannot grow it without end (the oldest go first).
    const seenAlive = new LRUCache<string, string>({ max: sessionCacheMax, ttl: sessionCacheMs });

    // Every token the project's auth server issues failing its signature check: the API was given
    // another project's secret (or an old one). Each user only sees 401; the operator is told why.
    // Not while tokens of ours verify: then the secret is the project's, and a token that names our
    // auth server as its issuer and fails is a forgery (anyone can write that `iss`), no reason to
    // have the operator change a working setting.
    const ownIssuer = config.SUPABASE_URL ? `${config.SUPABASE_URL.replace(/\/+$/, '')}/auth/v1` : undefined;
    let userTokenVerifiedAt = Number.NEGATIVE_INFINITY;
    const warnOfWrongSecretNow = warnOncePerMinute(
      "a token of SUPABASE_URL's auth server failed its signature check: SUPABASE_JWT_SECRET is probably not that project's (its tokens are all refused, 401)",
    );
    const warnOfWrongSecret = (log: FastifyBaseLogger) => {
      if (Date.now() - userTokenVerifiedAt < SECRET_PROVEN_FOR_MS) return;
      warnOfWrongSecretNow(log);
    };

    // Tokens of ours signed with the project's legacy secret, and no secret given: with only the
    // JWKS to go by (which publishes no such key), every user is refused and the operator is told why.
    const warnOfMissingSecret = warnOncePerMinute(
      "a token of SUPABASE_URL's auth server is signed with the project's JWT secret (HS256) and SUPABASE_JWT_SECRET is not set: its tokens are all refused (401)",
    );

    const signingKeysUnavailable = (error: KeySourceUnavailableError, log: FastifyBaseLogger) => {
      log.error({ reason: error.message }, 'signing keys (JWKS) unavailable');
      return serviceUnavailable('Authentication service unavailable');
    };

    app.decorateRequest('caller', null);
    // An onError hook runs for failed requests alone: answers that succeed pay nothing for the challenge.
    app.addHook('onError', function sendBearerChallenge(_request, reply, error, done) {
      const challenge = bearerChallengeOf(error);
      if (challenge) reply.header('www-authenticate', challenge);
      done();
    });
    // Counts this instance's sign-outs. A lookup that a sign-out overtook (the
    // session read open, then ended and forgotten before the answer came back)
    // must not put the session back: its tokens would work here for another
    // sessionCacheMs. Any sign-out meanwhile skips the caching, not the answer.
    let sessionsForgotten = 0;
    app.decorate('forgetSession', (sessionId: string) => {
      sessionsForgotten += 1;
      seenAlive.delete(sessionId);
    });
    // Rare (a password reset), so a walk over the cache (at most sessionCacheMax entries) will do.
    app.decorate('forgetUserSessions', (userId: string) => {
      sessionsForgotten += 1;
      for (const [sessionId, owner] of seenAlive.entries()) if (owner === userId) seenAlive.delete(sessionId);
    });

    /** Is the session still open in auth.sessions, and which roles does its user hold? One query. */
    async function sessionState(userId: string, sessionId: string) {
      const cached = seenAlive.has(sessionId);
      const forgottenBefore = sessionsForgotten;
      const [row] = await app.db.bounded(selectSessionStateElevated(app.db.sql, userId, sessionId, cached));
      if (row.active && !cached && sessionsForgotten === forgottenBefore) seenAlive.set(sessionId, userId);
      return row;
    }

    /** The caller a token stands for, or 401 / 503. `fresh` asks the database even when the session was seen alive. */
    async function callerFromToken(token: string, log: FastifyBaseLogger, { fresh = false } = {}): Promise<Caller> {
      let verified;
      try {
        verified = await verify(token);
      } catch (error) {
        if (error instanceof InvalidTokenError) {
          // Without SUPABASE_URL no token is of our auth server: a token without `iss` is not either.
          const ours = (issuer: unknown) => ownIssuer !== undefined && issuer === ownIssuer;
          if (error instanceof SignatureMismatchError && ours(error.issuer)) warnOfWrongSecret(log);
          if (error instanceof SecretMissingError && ours(error.issuer)) warnOfMissingSecret(log);
          throw withBearerChallenge(credentialsRefused(`token refused: ${error.message}`), error instanceof ExpiredTokenError ? 'expired' : 'invalid');
        }
        if (error instanceof KeySourceUnavailableError) throw signingKeysUnavailable(error, log);
        throw error;
      }
      if (verified.kind === 'legacy-admin') return { kind: 'legacy-admin', userId: verified.claims.userId, roles: ['admin'] };
      userTokenVerifiedAt = Date.now();
      const { claims } = verified;
      if (fresh) seenAlive.delete(claims.session_id);
      let state;
      try {
        state = await sessionState(claims.sub, claims.session_id);
      } catch (error) {
        log.error({ err: error }, 'session lookup failed');
        // The session is checked in PostgreSQL: an operator told "authentication" would look at
        // the auth server, which is up. A busy or unreachable database says which it is.
        const fromDb = fromPostgresError(error);
        throw fromDb && fromDb.statusCode === 503 ? fromDb : serviceUnavailable('Service temporarily unavailable');
      }
      if (!state.active) throw withBearerChallenge(credentialsRefused('the session has ended'), 'invalid');
      return { kind: 'user', userId: claims.sub, email: claims.email, sessionId: claims.session_id, roles: state.roles, claims };
    }

    async function authenticate(request: FastifyRequest): Promise<Caller> {
      if (request.caller) return request.caller;
      const token = bearerToken(request);
      if (!token) throw withBearerChallenge(credentialsRefused('no bearer token'), 'missing');
      request.caller = await callerFromToken(token, request.log);
      return request.caller;
    }

    /** The claims of a user token of ours, expired or not; null for any other token. */
    async function userClaimsOf(token: string) {
      try {
        const verified = await verify(token);
        return verified.kind === 'legacy-admin' ? null : verified.claims;
      } catch (error) {
        if (!(error instanceof InvalidTokenError)) throw error;
      }
      try {
        return await verify.verifyExpiredUserToken(token);
      } catch (error) {
        if (error instanceof InvalidTokenError) return null;
        throw error;
      }
    }

    async function sessionOfToken(token: string, log: FastifyBaseLogger) {
      try {
        const claims = await userClaimsOf(token);
        return claims && { userId: claims.sub, sessionId: claims.session_id };
      } catch (error) {
        if (error instanceof KeySourceUnavailableError) throw signingKeysUnavailable(error, log);
        throw error;
      }
    }

    app.decorate('callerFromToken', callerFromToken);
    app.decorate('sessionOfToken', sessionOfToken);
    app.decorate('authenticate', authenticate);

    app.decorate('requireUser', async function requireUser(request: FastifyRequest) {
      const caller = await authenticate(request);
      if (caller.kind !== 'user') throw withBearerChallenge(credentialsRefused('a legacy admin token, on a route for signed-in users'), 'invalid');
    });

    app.decorate('requireRole', (...roles: readonly AppRole[]) =>
      async function requireRole(request: FastifyRequest) {
        const caller = await authenticate(request);
        if (caller.kind === 'legacy-admin') {
          if (roles.includes('admin')) return;
          throw withBearerChallenge(credentialsRefused('a legacy admin token, on a route for other roles'), 'invalid');
        }
        if (!caller.roles.some((role) => roles.includes(role))) throw forbidden();
      },
    );
  },
  { name: 'auth', dependencies: ['db'] },
);
