import { hash, randomUUID } from 'node:crypto';
import type { Redis } from 'ioredis';
import { withinDeadline } from './deadline.ts';
import type { FallbackState } from './redis-availability.ts';

// Keys that one request at a time may hold, across every instance of the
// service: the password reset holds the address while the auth server sends
// its e-mail (docs/accounts.md). With Redis a claim is a key set only if
// absent, with an expiry, so a claim whose instance died is gone after
// `ttlMs`, or the claim's own (a holder whose work can outlast `ttlMs` names
// a longer one, or the hold would lapse while it works); while Redis fails or
// misses its deadline, claims are held in this process (as the rate limiter
// counts there meanwhile, sharing its state), so a guard never opens because
// Redis is down.

export interface ExclusiveClaims {
  /**
   * True when the caller now holds `key` (until `release`, at most the expiry: `ttlMs` when
   * given, else the claims' own); false when another request holds it.
   */
  claim(key: string, ttlMs?: number): Promise<boolean>;
  /** Gives `key` back; a claim that expired and was taken by another request stays theirs. */
  release(key: string): Promise<void>;
}

/** Claims held in this process only, until released: they die with it, so they need no expiry. */
export function localClaims(): ExclusiveClaims {
  const held = new Set<string>();
  return {
    async claim(key) {
      if (held.has(key)) return false;
      held.add(key);
      return true;
    },
    async release(key) {
      held.delete(key);
    },
  };
}

export interface RedisClaimsOptions {
  redis: Redis;
  /** Prefix of the keys (the rate limiter's namespace). */
  nameSpace: string;
  /** The expiry of a claim that names none. */
  ttlMs: number;
  deadlineMs: number;
  /** How long claims stay in the process after a failure. */
  localForMs: number;
  state: FallbackState;
}

// Deletes the key only while it still holds this claim's token.
const RELEASE_SCRIPT = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/** Claims held in Redis while it answers within the deadline, in this process meanwhile. */
export function redisClaims(options: RedisClaimsOptions): ExclusiveClaims {
  const { redis, nameSpace, ttlMs, deadlineMs, localForMs, state } = options;
  const local = localClaims();
  // Where each claim of this process is held: its Redis token, or null for a local one.
  const tokens = new Map<string, string | null>();
  // Hashed: the keys (e-mail addresses) are nobody's business in Redis.
  const redisKey = (key: string) => `${nameSpace}claim:${hash('sha256', key, 'base64url')}`;

  const answered = <T>(command: Promise<T>) => withinDeadline(command, deadlineMs, () => new Error(`Redis did not answer within ${deadlineMs} ms`));

  function fellBack(error: unknown) {
    state.localUntil = Date.now() + localForMs;
    state.onFailure(error instanceof Error ? error : new Error(String(error)));
  }

  async function claimLocally(key: string): Promise<boolean> {
    if (tokens.has(key) || !(await local.claim(key))) return false;
    tokens.set(key, null);
    return true;
  }

  return {
    async claim(key, claimTtlMs = ttlMs) {
      if (Date.now() < state.localUntil) return claimLocally(key);
      const token = randomUUID();
      try {
        const answer = await answered(redis.set(redisKey(key), token, 'PX', claimTtlMs, 'NX'));
        if (answer !== 'OK') return false;
        tokens.set(key, token);
        return true;
      } catch (error) {
        fellBack(error);
        return claimLocally(key);
      }
    },

    async release(key) {
      const token = tokens.get(key);
      if (token === undefined) return;
      tokens.delete(key);
      if (token === null) return local.release(key);
      // Not given back in time, the claim ends at its expiry.
      await answered(redis.eval(RELEASE_SCRIPT, 1, redisKey(key), token)).catch(fellBack);
    },
  };
}
