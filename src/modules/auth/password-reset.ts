import { hash } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { badRequest, internalError, notFound, RateLimitError } from '../../lib/errors.ts';
import type { ExclusiveClaims } from '../../lib/exclusive-claims.ts';
import type { Database } from '../../plugins/db.ts';
import type { SupabaseAuth } from '../../plugins/supabase.ts';
import { type AuthFailure, fail } from './failures.ts';
import { endAllSessionsElevated, selectProfileByEmailElevated } from './queries.ts';
import type { ResetTokenBudget } from './reset-token-budget.ts';

// The password reset: the e-mail with its link, and the new password set with
// the link's token (docs/accounts.md). Each holds a claim while the auth
// server works, so requests at once (a double click, or two instances) do
// not race it.

/** update-password's answer for a reset token that is unknown, expired, used, or being used by another request. */
const invalidResetToken = () => badRequest('Invalid or expired reset token');

/** Auth server calls the reset e-mail makes: the request to send it. */
export const RESET_EMAIL_AUTH_CALLS = 1;
/** Auth server calls a token's redemption makes at most: verify, set the password, end the sessions. */
export const REDEMPTION_AUTH_CALLS = 3;
/** What a hold adds to its auth server calls: the database step (DATABASE_ACQUIRE_TIMEOUT_MS, 5 s by default) and the scheduling around them. */
export const HOLD_MARGIN_MS = 30_000;

/**
 * How long a claim is held should its release never come (its instance died):
 * longer than the work it guards can take, each call to the auth server up to
 * AUTH_TIMEOUT_MS. A fixed minute lapsed while a redemption with a 20 s
 * deadline was still under way, and a second request could redeem the token again.
 */
export const holdMs = (authCalls: number, authTimeoutMs: number) => authCalls * authTimeoutMs + HOLD_MARGIN_MS;

export interface PasswordResetDeps {
  supabase: SupabaseAuth;
  db: Database;
  /** Where the reset link in the e-mail points (the front end). */
  resetRedirectUrl: string;
  forgetUserSessions(userId: string): void;
  /** Addresses whose reset e-mail is being asked for, and reset tokens being redeemed, held across instances. */
  claims: ExclusiveClaims;
  /** Reset-token redemptions per window across every client (reset-token-budget.ts). */
  resetTokenBudget: ResetTokenBudget;
}

export function createPasswordResetService(deps: PasswordResetDeps) {
  const { supabase, db } = deps;

  /** update-password's work, while the request holds its token: redeems it, sets the password, ends every session. */
  async function redeemResetToken(ip: string, token: string, newPassword: string, log: FastifyBaseLogger) {
    const client = supabase.forRequest(ip);
    const verified = await client.auth.verifyOtp({ token_hash: token, type: 'recovery' });
    if (verified.error || !verified.data.session) fail(verified.error, invalidResetToken());
    const updated = await client.auth.updateUser({ password: newPassword });
    // The auth server refuses to set the password the account already has (a user
    // who typed the old one again). That is the password asked for, by a caller who
    // proved they hold the token: answered as a success, every session ended as on
    // any other. A 400 left the user with a spent link and a new e-mail refused for
    // a minute (429), for a password that was what they wanted all along.
    if (updated.error && (updated.error as AuthFailure).code !== 'same_password') {
      // The token is spent; the session it opened is of no use to anyone.
      await client.auth.signOut({ scope: 'local' }).catch(() => {});
      fail(updated.error, internalError(), { weak_password: badRequest('Password must be at least 6 characters') });
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

  return {
    async requestPasswordReset(ip: string, email: string) {
      const [known] = await db.bounded(selectProfileByEmailElevated(db.sql, email));
      if (!known) throw notFound('No user found with this email');
      // The auth server's one-e-mail-a-minute check races itself: requests at
      // once (a double click, or two instances) each sent an e-mail, each
      // voiding the link before it. One at a time per address, then; the
      // others are answered as the auth server answers a second request
      // within the minute.
      const claim = `password-reset:${email}`;
      if (!(await deps.claims.claim(claim, holdMs(RESET_EMAIL_AUTH_CALLS, supabase.timeoutMs)))) throw new RateLimitError(60);
      try {
        const { error } = await supabase.forRequest(ip).auth.resetPasswordForEmail(email, { redirectTo: deps.resetRedirectUrl });
        if (error) fail(error, internalError());
      } finally {
        await deps.claims.release(claim);
      }
    },

    /** Sets a new password with the reset token from the e-mail, then ends every session of the user. */
    async updatePassword(ip: string, token: string, newPassword: string, log: FastifyBaseLogger) {
      // Before anything asks the auth server: while the budget is spent, a right guess is refused too.
      await deps.resetTokenBudget.draw(log);
      // The auth server's verify step does not lock the token: two requests
      // with it at once (a double submit, or two instances) were both
      // answered 200, each setting its own password, and only the last one
      // set worked. One at a time per token, then; the others are answered
      // as a used token is. Named by the token's hash: the token itself
      // opens the account, and goes into no key.
      const claim = `password-update:${hash('sha256', token, 'base64url')}`;
      if (!(await deps.claims.claim(claim, holdMs(REDEMPTION_AUTH_CALLS, supabase.timeoutMs)))) throw invalidResetToken();
      try {
        await redeemResetToken(ip, token, newPassword, log);
      } finally {
        await deps.claims.release(claim);
      }
    },
  };
}
