import { hash } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { AppError, badRequest, conflict, forbidden, internalError, notFound, RateLimitError, unauthorized, withCause } from '../../lib/errors.ts';
import type { ExclusiveClaims } from '../../lib/exclusive-claims.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database } from '../../plugins/db.ts';
import { authRateLimit, authRefusal, authServerFailure, isAuthServerError, type SupabaseAuth, withinDeadline } from '../../plugins/supabase.ts';
import { endAllSessionsElevated, endSessionElevated, endSessionOfRefreshTokenElevated, getProfile, selectProfileByEmailElevated, selectProfileNameElevated } from './queries.ts';
import { displayName, isoTimestamp, toSession } from './supabase-answers.ts';

// Accounts are Supabase Auth's: every operation here is delegated to it
// through supabase-js; we only shape the answers the SPEC asks for and read
// the mirrored profile.

type AuthFailure = { code?: string; status?: number; message?: string };

/** The auth server's refusal to send an e-mail: one to this address within the last minute, or its hourly budget spent. */
const isEmailResendRefused = (error: unknown) => (error as AuthFailure | null)?.code === 'over_email_send_rate_limit';

/** update-password's answer for a reset token that is unknown, expired, used, or being used by another request. */
const invalidResetToken = () => badRequest('Invalid or expired reset token');

export interface AuthServiceDeps {
  supabase: SupabaseAuth;
  db: Database;
  /** Where the reset link in the e-mail points (the front end). */
  resetRedirectUrl: string;
  linkProviders: readonly string[];
  forgetSession(sessionId: string): void;
  forgetUserSessions(userId: string): void;
  /** Addresses whose reset e-mail is being asked for, and reset tokens being redeemed, held across instances. */
  claims: ExclusiveClaims;
}

/**
 * Turns an auth server failure into our error: 503 when it is down, 500 when
 * it failed the request itself (`fallback` if that is a 500, else the SPEC's
 * `Internal server error`), else `fallback` or the error for its code.
 */
function fail(error: unknown, fallback: AppError, byCode: Record<string, AppError> = {}): never {
  const failed = authServerFailure(error);
  // A 500 of the route's own (sign up's `Failed to register user`) says it in the SPEC's words.
  // A 500 of ours keeps the auth server's answer as its cause, which its log line writes.
  const withAnswer = () => (fallback.statusCode >= 500 ? withCause(fallback, error) : fallback);
  if (failed) throw failed.statusCode === 500 && fallback.statusCode === 500 ? withAnswer() : failed;
  const { code } = (error ?? {}) as AuthFailure;
  if (code && byCode[code]) throw byCode[code];
  throw authRateLimit(error) ?? withAnswer();
}

export function createAuthService(deps: AuthServiceDeps) {
  const { supabase, db } = deps;

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

  /** update-password's work, while the request holds its token: redeems it, sets the password, ends every session. */
  async function redeemResetToken(ip: string, token: string, newPassword: string, log: FastifyBaseLogger) {
    const client = supabase.forRequest(ip);
    const verified = await client.auth.verifyOtp({ token_hash: token, type: 'recovery' });
    if (verified.error || !verified.data.session) fail(verified.error, invalidResetToken());
    const updated = await client.auth.updateUser({ password: newPassword });
    if (updated.error) {
      // The token is spent; the session it opened is of no use to anyone.
      await client.auth.signOut({ scope: 'local' }).catch(() => {});
      fail(updated.error, internalError(), {
        same_password: badRequest('New password must differ from the old one; request a new reset e-mail'),
        weak_password: badRequest('Password must be at least 6 characters'),
      });
    }
    const userId = verified.data.session.user.id;
    try {
      const { error } = await client.auth.signOut({ scope: 'global' });
      if (error) {
        // The password has changed and the token is spent: a 503 now would
        // send the user back to a link that no longer works. The auth server
        // ended the other sessions with the password change; the one the
        // token opened would live on unused for 30 days. So the sessions are
        // ended here, as its global /logout ends them, and the answer is 200.
        log.warn({ err: error }, "the auth server did not end the sessions after a password reset; they are ended in the database");
        await db.bounded(endAllSessionsElevated(db.sql, userId));
      }
    } finally {
      // Ended, or at least every session but the token's, with the password change: none is
      // trusted from this instance's cache for its remaining seconds (the old tokens worked for up to 5 s).
      deps.forgetUserSessions(userId);
    }
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

    async refresh(ip: string, refreshToken: string, log: FastifyBaseLogger) {
      const { data, error } = await withinDeadline(
        supabase.forRequest(ip).auth.refreshSession({ refresh_token: refreshToken }),
        supabase.timeoutMs,
      );
      if (error || !data.session) {
        if ((error as AuthFailure | null)?.code === 'refresh_token_already_used') await endSessionOfReusedToken(refreshToken, log);
        fail(error, unauthorized('Invalid or expired refresh token'));
      }
      return toSession(data.session);
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

    async requestPasswordReset(ip: string, email: string) {
      const [known] = await db.bounded(selectProfileByEmailElevated(db.sql, email));
      if (!known) throw notFound('No user found with this email');
      // The auth server's one-e-mail-a-minute check races itself: requests at
      // once (a double click, or two instances) each sent an e-mail, each
      // voiding the link before it. One at a time per address, then; the
      // others are answered as the auth server answers a second request
      // within the minute.
      const claim = `password-reset:${email}`;
      if (!(await deps.claims.claim(claim))) throw new RateLimitError(60);
      try {
        const { error } = await supabase.forRequest(ip).auth.resetPasswordForEmail(email, { redirectTo: deps.resetRedirectUrl });
        if (error) fail(error, internalError());
      } finally {
        await deps.claims.release(claim);
      }
    },

    /** Sets a new password with the reset token from the e-mail, then ends every session of the user. */
    async updatePassword(ip: string, token: string, newPassword: string, log: FastifyBaseLogger) {
      // The auth server's verify step does not lock the token: two requests
      // with it at once (a double submit, or two instances) were both
      // answered 200, each setting its own password, and only the last one
      // set worked. One at a time per token, then; the others are answered
      // as a used token is. Named by the token's hash: the token itself
      // opens the account, and goes into no key.
      const claim = `password-update:${hash('sha256', token, 'base64url')}`;
      if (!(await deps.claims.claim(claim))) throw invalidResetToken();
      try {
        await redeemResetToken(ip, token, newPassword, log);
      } finally {
        await deps.claims.release(claim);
      }
    },

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
      if (error) {
        fail(error, badRequest('Invalid provider token'), {
          // The caller's own token, refused by the auth server: in the 5 s past
          // its expiry that the API still takes (the auth server allows none),
          // or its session just ended. A 401 has the front end refresh and retry.
          bad_jwt: unauthorized(),
          session_not_found: unauthorized(),
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
