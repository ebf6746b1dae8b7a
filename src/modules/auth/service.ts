import type { FastifyBaseLogger } from 'fastify';
import { decodeJwt } from 'jose';
import { AppError, badRequest, conflict, forbidden, notFound, unauthorized, withBearerChallenge, withCause } from '../../lib/errors.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import { authRefusal, authUnavailable, isAuthServerError } from '../../plugins/supabase.ts';
import { type AuthFailure, fail } from './failures.ts';
import { createPasswordResetService, type PasswordResetDeps } from './password-reset.ts';
import { endSessionElevated, endSessionOfRefreshTokenElevated, getProfile, selectProfileByEmailElevated, selectProfileNameElevated } from './queries.ts';
import { createRefreshesInFlight, isRefreshConflict, retryingConflicts } from './refresh-races.ts';
import { displayName, isoTimestamp, toSession } from './supabase-answers.ts';

// Accounts are Supabase Auth's: every operation here is delegated to it
// through supabase-js; we only shape the answers the SPEC asks for and read
// the mirrored profile. The password reset is password-reset.ts's.

/** The auth server's refusal to send an e-mail: one to this address within the last minute, or its hourly budget spent. */
const isEmailResendRefused = (error: unknown) => (error as AuthFailure | null)?.code === 'over_email_send_rate_limit';

export interface AuthServiceDeps extends PasswordResetDeps {
  linkProviders: readonly string[];
  forgetSession(sessionId: string): void;
}

export function createAuthService(deps: AuthServiceDeps) {
  const { supabase, db } = deps;
  const passwordReset = createPasswordResetService(deps);
  const refreshesInFlight = createRefreshesInFlight();

  /**
   * Ends the session a verified token names in the database, as the auth
   * server's /logout would (for a token the API or the auth server no longer
   * takes); 401 when that session has ended already.
   */
  async function signOutInDatabase(session: { userId: string; sessionId: string }) {
    const [{ ended }] = await db.bounded(endSessionElevated(db.sql, session.userId, session.sessionId));
    deps.forgetSession(session.sessionId);
    if (!ended) throw unauthorized('No active session');
  }

  /**
   * Ends the session of a refresh token the auth server refused as already
   * used. With rotation on, the auth server revokes the session's refresh
   * tokens then, but honours each for its reuse interval (10 s) after that,
   * and a refresh within it hands out a new token that lives on: a thief
   * refreshing every few seconds kept the session. The client is answered
   * 401 whatever happens here; a failure is logged.
   */
  async function endSessionOfReusedToken(refreshToken: string, log: FastifyBaseLogger) {
    try {
      const [{ session }] = await db.bounded(endSessionOfRefreshTokenElevated(db.sql, refreshToken));
      if (!session) return;
      deps.forgetSession(session);
      log.warn({ sessionId: session }, 'a refresh token was used again after newer ones: its session is ended');
    } catch (error) {
      log.warn({ err: error }, 'the session of a reused refresh token could not be ended; only the auth server revoked its refresh tokens');
    }
  }

  /**
   * Whether the caller's account holds the identity of `provider` that the id
   * token names (its subject); false when the auth server cannot say. Read
   * without verifying: the auth server has just verified the token to answer
   * that its identity is linked.
   */
  async function identityIsCallers(ip: string, accessToken: string, provider: string, idToken: string): Promise<boolean> {
    let subject: unknown;
    try {
      subject = decodeJwt(idToken).sub;
    } catch {
      return false;
    }
    const { data, error } = await supabase.forRequest(ip, accessToken).auth.getUser(accessToken);
    if (error || !data.user) return false;
    return (data.user.identities ?? []).some((identity) => identity.provider === provider && identity.id === subject);
  }

  /** Whether an account holds `email`; false when the database cannot say either. */
  const addressTaken = async (email: string) =>
    (await db.bounded(selectProfileByEmailElevated(db.sql, email)).catch(() => [])).length > 0;
  return {
    async signUp(ip: string, input: { email: string; password: string; name: string }) {
      // Asked first: with e-mail confirmation on, the auth server answers a
      // sign-up for an address still waiting for it by sending the
      // confirmation e-mail again (to an address the caller may not own) and
      // answering with the waiting account, the new password and name
      // dropped. The checks after the auth server's answer cover the races.
      if (await addressTaken(input.email)) throw conflict('User with this email already exists');
      const { data, error } = await supabase.forRequest(ip).auth.signUp({
        email: input.email,
        password: input.password,
        options: { data: { name: input.name } },
      });
      if (error || !data.user) {
        const duplicate = conflict('User with this email already exists');
        // A sign-up that lost a race for its address fails in the auth
        // server's database, a 500 'Database error saving new user' like any
        // other; the address being taken now says which one it was. With
        // confirmation on, a sign-up for an address whose account is not
        // confirmed yet has the auth server send the confirmation again, and
        // within a minute of the last one it refuses that as too many e-mails;
        // the account exists all the same. (A new address refused by the
        // hourly e-mail budget has no account, and keeps its 429.)
        if ((isAuthServerError(error) || isEmailResendRefused(error)) && (await addressTaken(input.email))) throw duplicate;
        fail(error, new AppError(500, 'Failed to register user'), {
          user_already_exists: duplicate,
          email_exists: duplicate,
          // Our checks mirror the auth server's (EmailSchema, PasswordSchema); should they ever differ, its refusal is still the client's error.
          weak_password: authRefusal(error),
          email_address_invalid: authRefusal(error),
          validation_failed: authRefusal(error),
        });
      }
      // With e-mail confirmation on, the auth server answers a known address
      // with an unconfirmed look-alike and no identities; say so as a conflict.
      if (data.user.identities && data.user.identities.length === 0) throw conflict('User with this email already exists');
      return {
        user: { id: data.user.id, email: data.user.email ?? input.email, name: input.name, createdAt: isoTimestamp(data.user.created_at) },
        session: data.session ? toSession(data.session) : null,
      };
    },

    async signIn(ip: string, email: string, password: string) {
      const client = supabase.forRequest(ip);
      const { data, error } = await client.auth.signInWithPassword({ email: email.trim().toLowerCase(), password });
      if (error || !data.session) {
        // The auth server says `email_not_confirmed` only once the password
        // matched, so it tells nobody without the password that the account exists.
        fail(error, unauthorized('Invalid email or password'), { email_not_confirmed: forbidden('Email not confirmed') });
      }
      // The profile holds the name (PUT /api/users/:id changes it there); the
      // auth server's copy is what the user signed up with. When it cannot be
      // read (503), the session just opened is ended: nobody would ever hold
      // its tokens, and it would stay open for the auth server's 30 days.
      const [profile] = await db.bounded(selectProfileNameElevated(db.sql, data.user.id)).catch(async (readError: unknown) => {
        await client.auth.admin.signOut(data.session.access_token, 'local').catch(() => {});
        throw readError;
      });
      return {
        user: {
          id: data.user.id,
          email: data.user.email ?? email,
          name: profile?.name ?? displayName(data.user),
          lastLogin: isoTimestamp(data.user.last_sign_in_at),
        },
        session: toSession(data.session),
      };
    },

    /**
     * A new session for `refreshToken`. Refreshes of one token at once share
     * one call here, and one that lost the race at the auth server (`conflict`,
     * another instance's refresh holding the session) is tried again: the
     * token is good, and a 401 would sign its user out (refresh-races.ts).
     */
    refresh(ip: string, refreshToken: string, log: FastifyBaseLogger) {
      return refreshesInFlight.share(refreshToken, async () => {
        const { data, error } = await retryingConflicts(
          () => supabase.forRequest(ip).auth.refreshSession({ refresh_token: refreshToken }),
          supabase.timeoutMs,
        );
        if (error || !data.session) {
          if ((error as AuthFailure | null)?.code === 'refresh_token_already_used') await endSessionOfReusedToken(refreshToken, log);
          // Still racing when the tries ran out: busy, not refused; 503 has the client try again (Retry-After).
          if (isRefreshConflict(error)) throw withCause(authUnavailable(), error);
          fail(error, unauthorized('Invalid or expired refresh token'));
        }
        return toSession(data.session);
      });
    },

    /**
     * Ends the caller's session at the auth server; its tokens stop working at
     * once here. When the auth server does not end it, the session is ended in
     * the database: the auth server allows no clock skew, so it refuses a token
     * in the 5 s past its expiry that the API still takes (the session lived
     * on, its refresh token good, while the user was told `No active
     * session`), and it may be down.
     */
    async signOut(ip: string, accessToken: string, session: { userId: string; sessionId: string }) {
      const { error } = await supabase.forRequest(ip).auth.admin.signOut(accessToken, 'local');
      if (error) return signOutInDatabase(session);
      deps.forgetSession(session.sessionId);
    },

    signOutInDatabase,

    ...passwordReset,

    async me(caller: Extract<Caller, { kind: 'user' }>) {
      const profile = await db.readAtOnceAsActor(dbActorOf(caller), (tx) => getProfile(tx, caller.userId));
      if (!profile) throw notFound('Profile not found');
      return {
        id: profile.id,
        email: profile.email,
        name: profile.name,
        createdAt: profile.created_at.toISOString(),
        lastLogin: profile.last_login?.toISOString() ?? null,
        roles: ['user', ...caller.roles],
      };
    },

    /** Links an identity of `provider` (its OIDC id token, and the nonce it was issued for, if any) to the caller's account. */
    async linkIdentity(ip: string, accessToken: string, { provider, token, nonce }: { provider: string; token: string; nonce?: string }) {
      if (!deps.linkProviders.includes(provider)) throw badRequest('Unsupported provider');
      const link = async () => {
        const { data, error } = await supabase.forRequest(ip, accessToken).auth.linkIdentity({ provider, token, nonce });
        // The id-token grant opens a new session as it links; nobody is handed
        // its tokens, so it is ended rather than left open for 30 days.
        if (data?.session) await supabase.forRequest(ip).auth.admin.signOut(data.session.access_token, 'local').catch(() => {});
        return error;
      };
      let error = await link();
      // Two links of one identity at once (a double click, or two accounts)
      // both pass the auth server's check for a linked identity, and the one
      // whose insert comes second fails in its database, a 500 'Error creating
      // identity' like any other. Asked once more, the auth server's check
      // sees the identity the other linked and says `identity_already_exists`.
      // (Our role cannot read auth.identities to ask the database instead.)
      // Any other 500 has one more try, which links or fails as before.
      if (isAuthServerError(error)) error = await link();
      // An identity already linked to the caller's own account is what was
      // asked, not a conflict: a retry after a lost answer, a first try's 500
      // that came after its link was stored (the auth server failing as it
      // answered), or the caller's own other request that linked it first.
      if ((error as AuthFailure | null)?.code === 'identity_already_exists' && (await identityIsCallers(ip, accessToken, provider, token))) return;
      if (error) {
        fail(error, badRequest('Invalid provider token'), {
          // The caller's own token, refused by the auth server: in the 5 s past
          // its expiry that the API still takes (the auth server allows none),
          // or its session just ended. A 401 has the front end refresh and retry.
          bad_jwt: withBearerChallenge(unauthorized(), 'expired'),
          session_not_found: withBearerChallenge(unauthorized(), 'invalid'),
          identity_already_exists: conflict('Identity is already linked to an account'),
          provider_disabled: badRequest('Unsupported provider'),
          oauth_provider_not_supported: badRequest('Unsupported provider'),
          manual_linking_disabled: badRequest('Identity linking is disabled'),
        });
      }
    },
  };
}

export type AuthService = ReturnType<typeof createAuthService>;
