import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { withinDeadline } from '../../plugins/supabase.ts';
import type { AuthFailure } from './failures.ts';

// One refresh token sent many times at once: two tabs waking up, a client
// retrying against two instances. The auth server refreshes a session one
// request at a time: a request polls for the session's row lock for 5 s and
// then gives up with 409 `conflict` ("Too many concurrent token refresh
// requests…"). The polling itself slows the one holding the lock, so on a
// busy host 20 at once had 18 of them give up. Answered 401, each would have
// a front end sign its user out, though the token is good: a request that
// comes after the winner is handed the winner's refresh token (the reuse
// interval).

/** Extra tries after a `conflict`; each can poll the auth server's lock for its 5 s, so the deadline usually ends them first. */
export const CONFLICT_RETRIES = 3;

/**
 * The auth server gave up waiting for the session's lock: other refreshes of
 * it are under way. Its token grant answers 409 for nothing else; the status
 * is read too, as supabase-js reads the code only from an answer that carries
 * the auth server's API version header, which a proxy in front may drop.
 */
export const isRefreshConflict = (error: unknown) => {
  const { code, status } = (error ?? {}) as AuthFailure;
  return code === 'conflict' || status === 409;
};

/**
 * `attempt()`, tried again after a short pause (jittered, so the losers do
 * not meet again at one moment) while the auth server answers `conflict`, at
 * most CONFLICT_RETRIES more times, all within `timeoutMs`: past it, 503
 * (withinDeadline). The last answer is returned as it is, `conflict` too.
 * No other answer is tried again.
 */
export function retryingConflicts<T extends { error: unknown }>(attempt: () => Promise<T>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  const tries = async () => {
    for (let retry = 0; ; retry += 1) {
      const answer = await attempt();
      if (!isRefreshConflict(answer.error) || retry === CONFLICT_RETRIES) return answer;
      const pause = 100 + randomInt(200);
      // Past the deadline the caller has had its 503: no try follows the one that was under way.
      if (Date.now() + pause >= deadline) return answer;
      await sleep(pause);
    }
  };
  return withinDeadline(tries(), timeoutMs);
}

/**
 * Runs one refresh per refresh token at a time in this process: a request
 * for a token whose refresh is under way shares that refresh's outcome
 * instead of queueing at the auth server for the lock. What is held is the
 * refresh's promise, by the token it was asked with, until it settles: a try
 * still running when its deadline answered 503 is no longer shared, so a
 * request then starts another (as before this sharing; the auth server's
 * reuse interval answers both alike).
 */
export function createRefreshesInFlight() {
  const inFlight = new Map<string, Promise<unknown>>();
  return {
    share<T>(refreshToken: string, refresh: () => Promise<T>): Promise<T> {
      const running = inFlight.get(refreshToken);
      if (running) return running as Promise<T>;
      const started = refresh().finally(() => inFlight.delete(refreshToken));
      inFlight.set(refreshToken, started);
      return started;
    },
  };
}
