import type { FastifyBaseLogger } from 'fastify';
import { RateLimitError } from '../../lib/errors.ts';
import type { RateStore } from '../../lib/fallback-rate-store.ts';

// One budget of reset-token redemptions shared by every client, when
// RESET_TOKEN_ATTEMPTS_PER_WINDOW is set (docs/accounts.md, "Reset tokens
// cannot be guessed"). The token update-password takes is the auth server's
// hex(SHA-224(e-mail + code)): anyone who knows an address can list every
// token it may have, and the per-address limits bound each address, not a
// guesser who holds thousands (an IPv6 /48 is 65,536 /64s). Every redemption
// then draws on one count per window, across all clients and, with REDIS_URL,
// all instances (in this process while Redis fails, as the rate limits do);
// once it is spent, update-password answers 429 to everyone until the window
// ends. It bounds this route only: the auth server's own /verify takes the
// same token, which is why the code's 10 digits are the defence and this is
// off unless set (for an auth server the internet cannot reach); and anyone
// can spend it on purpose, stopping every user's reset meanwhile.
//
// Each redemption is counted before the auth server is asked, not after it
// has said the token was wrong: counted afterwards, a burst of guesses sent
// at once would all pass the check before the first failure was counted. A
// right token then costs the budget one too, once per reset e-mail, which
// next to the budget is nothing.

/** The one key of the count, in the limits' store. */
const KEY = 'reset-token-redemptions';

export interface ResetTokenBudgetOptions {
  /** Its own counter (app.newRateStore()): Redis while it answers, else this process. */
  store: RateStore;
  /** Redemptions allowed per window, across every client (RESET_TOKEN_ATTEMPTS_PER_WINDOW); 0 counts none. */
  max: number;
  /** The window, in ms (RESET_TOKEN_WINDOW_MS). */
  windowMs: number;
}

export interface ResetTokenBudget {
  /** Counts one redemption; rejects with the 429 (Retry-After: the rest of the window) when the window's are spent. */
  draw(log: FastifyBaseLogger): Promise<void>;
}

export function createResetTokenBudget({ store, max, windowMs }: ResetTokenBudgetOptions): ResetTokenBudget {
  if (max === 0) return { draw: async () => {} };
  // When the window this instance last warned about ends: one warning per window, not one per refusal.
  let warnedUntil = 0;
  return {
    draw(log) {
      return new Promise((resolve, reject) => {
        store.incr(
          KEY,
          (error, count) => {
            if (error || !count) return reject(error ?? new Error('rate-limit store gave no count'));
            if (count.current <= max) return resolve();
            const retryAfter = Math.max(1, Math.ceil(count.ttl / 1000));
            const now = Date.now();
            if (now >= warnedUntil) {
              warnedUntil = now + count.ttl;
              log.warn(
                { budget: max, windowMs, retryAfter },
                'reset-token budget spent: update-password answers 429 to every client until the window ends (many wrong reset tokens: someone may be guessing them)',
              );
            }
            reject(new RateLimitError(retryAfter));
          },
          windowMs,
          max,
        );
      });
    },
  };
}
