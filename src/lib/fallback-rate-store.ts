import { createRequire } from 'node:module';
import type { FastifyRateLimitStore } from '@fastify/rate-limit';
import type { Redis } from 'ioredis';
import { LRUCache } from 'lru-cache';
import type { CountingState } from './redis-availability.ts';

// A rate-limit store for @fastify/rate-limit that counts in Redis while Redis
// answers, and in this process when it does not: every Redis command has a
// deadline, and after a failure the store counts locally for a while before
// it asks Redis again, so a Redis that accepts connections but never answers
// costs at most one deadline now and then, and never opens the limits. When
// counting returns to Redis, each key's local count is carried there once, so
// neither a stall (Redis missed the hits counted here) nor a restart without
// persistence (Redis lost them all) gives a client a second budget.

type Store = FastifyRateLimitStore;
type Callback = Parameters<Store['incr']>[1];
type RouteOptions = Parameters<Store['child']>[0];
type Count = { current: number; ttl: number };

// The library's Redis store (CommonJS, untyped), and the interface of our in-memory one (LocalCounts).
interface LibraryRedisStore extends Store {
  /** The prefix of its keys in Redis. */
  readonly key: string;
  child(routeOptions: RouteOptions): LibraryRedisStore;
}
interface InProcessStore extends Store {
  /** A key's count without counting (synchronous). */
  read(key: string, callback: (error: Error | null, count: Count) => void, timeWindow: number, max: number): void;
  child(routeOptions: RouteOptions): InProcessStore;
}
const require = createRequire(import.meta.url);
const RedisStore = require('@fastify/rate-limit/store/RedisStore.js') as new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  redis: Redis,
  nameSpace: string,
) => LibraryRedisStore;

// Adds this request and the hits Redis missed, raises the count to what this
// instance counted in its window (an empty, restarted Redis), and gives a key
// that Redis did not have the rest of that window. The key's expiry is read
// before and set after (not SET's KEEPTTL, which Redis 5 refuses after the
// INCRBY has counted, so every try would count again).
const CARRY_SCRIPT = `
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = tonumber(ARGV[3]) end
local current = redis.call('INCRBY', KEYS[1], ARGV[1])
local floor = tonumber(ARGV[2])
if current < floor then
  redis.call('SET', KEYS[1], floor)
  current = floor
end
redis.call('PEXPIRE', KEYS[1], ttl)
return {current, ttl}`;

export interface FallbackOptions {
  redis: Redis;
  nameSpace: string;
  deadlineMs: number;
  /** How long counting stays local after a failure. */
  localForMs: number;
  state: CountingState;
}

/** Per key: the outage after which its count last reached Redis (0: not since), and the hits counted here without asking Redis. */
type KeySync = { outage: number; missed: number };
type Carry = { missed: number; floor: number; ttl: number };

class FallbackStore implements Store {
  private readonly remote: LibraryRedisStore;
  private readonly local: InProcessStore;
  private readonly options: FallbackOptions;
  // Bounded apart from the local counts: a key forgotten here carries its local count (the floor)
  // but not the hits Redis missed, which that floor covers unless Redis had counted more.
  private readonly syncs = new LRUCache<string, KeySync>({ max: 5_000 });

  constructor(remote: LibraryRedisStore, local: InProcessStore, options: FallbackOptions) {
    this.remote = remote;
    this.local = local;
    this.options = options;
  }

  incr(key: string, callback: Callback, timeWindow: number, max: number): void {
    const { state, deadlineMs, localForMs } = this.options;
    if (Date.now() < state.localUntil) {
      this.countLocally(key, callback, timeWindow, max);
      return;
    }
    const carry = this.carryFor(key, timeWindow);
    let settled = false;
    const fallBack = (error: Error) => {
      settled = true;
      state.localUntil = Date.now() + localForMs;
      state.onFailure(error);
      this.sentUnanswered(key);
      this.local.incr(key, callback, timeWindow, max);
    };
    // A timer that fires late, after the event loop stalled, runs before that
    // turn's I/O is read: Redis's answer may be in the socket already (a soak at
    // 0.2–1.2 s of loop lag took Redis for down every 6–12 s). The deadline
    // reads pending I/O once more (setImmediate: after the poll phase) first.
    let lastLook: NodeJS.Immediate | undefined;
    const timer = setTimeout(() => {
      lastLook = setImmediate(() => {
        if (!settled) fallBack(new Error(`Redis did not answer within ${deadlineMs} ms`));
      });
    }, deadlineMs);
    const answered: Callback = (error, result) => {
      if (settled) return;
      clearTimeout(timer);
      clearImmediate(lastLook);
      if (error || !result) {
        fallBack(error ?? new Error('Redis gave no result'));
        return;
      }
      settled = true;
      state.onAnswer();
      // Keep the local count in step, so a fall-back starts from about where Redis was.
      this.local.incr(key, () => {}, timeWindow, max);
      callback(null, result);
    };
    if (carry) this.countCarrying(key, carry, answered);
    else this.remote.incr(key, answered, timeWindow, max);
  }

  child(routeOptions: RouteOptions): Store {
    return new FallbackStore(this.remote.child(routeOptions), this.local.child(routeOptions), this.options);
  }

  /** Counted here only: Redis has missed this hit. */
  private countLocally(key: string, callback: Callback, timeWindow: number, max: number): void {
    const sync = this.syncs.get(key);
    if (sync) {
      sync.outage = 0;
      sync.missed += 1;
    } else {
      this.syncs.set(key, { outage: 0, missed: 1 });
    }
    this.local.incr(key, callback, timeWindow, max);
  }

  /** What to carry to Redis with this count: nothing until an outage, and nothing once the key has been carried since the latest. */
  private carryFor(key: string, timeWindow: number): Carry | undefined {
    const { outages } = this.options.state;
    if (outages === 0) return undefined;
    const sync = this.syncs.get(key);
    if (sync?.outage === outages) return undefined;
    let counted: Count = { current: 0, ttl: 0 };
    this.local.read(key, (_error, count) => (counted = count), timeWindow, 0);
    this.syncs.set(key, { outage: outages, missed: 0 });
    if (counted.current === 0) return undefined;
    // Hits counted in an earlier window of this process are not this window's.
    const missed = Math.min(sync?.missed ?? 0, counted.current);
    return { missed, floor: counted.current + 1, ttl: Math.max(1, counted.ttl) };
  }

  /**
   * A count (or a carry) sent and not answered may still be counted: a
   * stalled Redis runs it when it wakes. Its hits are not carried again, so
   * nothing is counted twice; the floor is, with the next count there (it
   * counts nothing twice), for a Redis that never ran it.
   */
  private sentUnanswered(key: string): void {
    const sync = this.syncs.get(key);
    if (sync) sync.outage = 0;
    else this.syncs.set(key, { outage: 0, missed: 0 });
  }

  private countCarrying(key: string, carry: Carry, answered: Callback): void {
    this.options.redis.eval(CARRY_SCRIPT, 1, this.remote.key + key, 1 + carry.missed, carry.floor, carry.ttl).then(
      (reply) => {
        const [current, ttl] = reply as [number, number];
        answered(null, { current, ttl });
      },
      (error: Error) => answered(error),
    );
  }
}

/** A counter of requests per key and time window: @fastify/rate-limit's store interface. */
export type RateStore = Store;

/**
 * How many clients one budget counts at once in this process; past it, new
 * clients share one overflow budget (LocalCounts). A key costs about 250
 * bytes of heap (measured on Node 24 with keys as clientNetworkOf writes
 * them), so a full budget holds about 12 MB.
 */
export const LOCAL_MAX_KEYS = 50_000;

type Window = { current: number; endsAt: number };

/**
 * Counts in this process, as the library's LocalStore does, with one
 * difference: a client's count is kept until its window ends, never dropped
 * to make room. The library's store is an LRU of 5,000 keys, and a client
 * who had spent its budget was given a new one after 5,000 other clients
 * (one /64 each: a /51) had asked. Dropping only keys under their budget
 * would not do either: a client holding one key more than the store, and
 * stopping one short of each budget, would start over on every key. So when the keys reach `maxKeys`, windows that have ended are dropped,
 * and if none has, a new client is counted in one overflow budget shared by
 * every new client until a window ends: the limits stay closed (new clients
 * may be refused meanwhile), and memory stays bounded.
 */
class LocalCounts implements InProcessStore {
  // In the order each window began: with one window length per store (each budget's), the first to end come first.
  private readonly windows = new Map<string, Window>();
  private overflow: Window | undefined;
  /** No window kept ends before this (a full sweep found none to drop): no sweep is tried until then. */
  private noneEndsBefore = 0;

  private readonly maxKeys: number;

  constructor(maxKeys: number) {
    this.maxKeys = maxKeys;
  }

  incr(key: string, callback: Callback, timeWindow: number): void {
    const now = Date.now();
    let window = this.windows.get(key);
    if (window && window.endsAt <= now) {
      this.windows.delete(key);
      window = undefined;
    }
    if (window) {
      window.current += 1;
    } else {
      this.dropEnded(now);
      if (this.windows.size >= this.maxKeys) {
        if (!this.overflow || this.overflow.endsAt <= now) this.overflow = { current: 0, endsAt: now + timeWindow };
        window = this.overflow;
        window.current += 1;
      } else {
        window = { current: 1, endsAt: now + timeWindow };
        this.windows.set(key, window);
      }
    }
    callback(null, { current: window.current, ttl: window.endsAt - now });
  }

  read(key: string, callback: (error: Error | null, count: Count) => void): void {
    const now = Date.now();
    const window = this.windows.get(key);
    if (!window || window.endsAt <= now) callback(null, { current: 0, ttl: 0 });
    else callback(null, { current: window.current, ttl: window.endsAt - now });
  }

  child(): InProcessStore {
    return new LocalCounts(this.maxKeys);
  }

  private dropEnded(now: number): void {
    // The front holds the oldest windows: a step or two a new key.
    for (const [key, window] of this.windows) {
      if (window.endsAt > now) break;
      this.windows.delete(key);
    }
    if (this.windows.size < this.maxKeys || now < this.noneEndsBefore) return;
    // Full, and the front has not ended: windows of another length may have, behind it. One
    // pass, then none until the earliest end it saw, so a full store costs no pass a request.
    let earliest = Number.POSITIVE_INFINITY;
    for (const [key, window] of this.windows) {
      if (window.endsAt <= now) this.windows.delete(key);
      else earliest = Math.min(earliest, window.endsAt);
    }
    this.noneEndsBefore = this.windows.size >= this.maxKeys ? earliest : 0;
  }
}

/** Counts in this process only, keeping each client's count until its window ends (at most `maxKeys` clients, then one shared overflow budget). */
export function localRateStore({ maxKeys = LOCAL_MAX_KEYS }: { maxKeys?: number } = {}): RateStore {
  return new LocalCounts(maxKeys);
}

/** Counts in Redis while it answers within the deadline, in this process meanwhile. */
export function redisRateStore(options: FallbackOptions): RateStore {
  return new FallbackStore(new RedisStore(false, false, options.redis, options.nameSpace), new LocalCounts(LOCAL_MAX_KEYS), options);
}
