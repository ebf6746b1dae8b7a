import { createRequire } from 'node:module';
import type { FastifyRateLimitStore } from '@fastify/rate-limit';
import type { Redis } from 'ioredis';

// A rate-limit store for @fastify/rate-limit that counts in Redis while Redis
// answers, and in this process when it does not: every Redis command has a
// deadline, and after a failure the store counts locally for a while before
// it asks Redis again, so a Redis that accepts connections but never answers
// costs at most one deadline now and then, and never opens the limits.

type Store = FastifyRateLimitStore;
type Callback = Parameters<Store['incr']>[1];
type RouteOptions = Parameters<Store['child']>[0];

// The library's own stores (CommonJS, untyped): the same counting, in Redis and in memory.
const require = createRequire(import.meta.url);
const RedisStore = require('@fastify/rate-limit/store/RedisStore.js') as new (
  continueExceeding: boolean,
  exponentialBackoff: boolean,
  redis: Redis,
  nameSpace: string,
) => Store;
const LocalStore = require('@fastify/rate-limit/store/LocalStore.js') as new (continueExceeding: boolean, exponentialBackoff: boolean) => Store;

export interface FallbackState {
  /** Until when (epoch ms) counting stays in the process without asking Redis. */
  localUntil: number;
  /** Called when Redis fails or misses the deadline (to log it now and then). */
  onFailure(error: Error): void;
}

export interface FallbackOptions {
  redis: Redis;
  nameSpace: string;
  deadlineMs: number;
  /** How long counting stays local after a failure. */
  localForMs: number;
  state: FallbackState;
}

class FallbackStore implements Store {
  private readonly remote: Store;
  private readonly local: Store;
  private readonly options: FallbackOptions;

  constructor(remote: Store, local: Store, options: FallbackOptions) {
    this.remote = remote;
    this.local = local;
    this.options = options;
  }

  incr(key: string, callback: Callback, timeWindow: number, max: number): void {
    const { state, deadlineMs, localForMs } = this.options;
    if (Date.now() < state.localUntil) {
      this.local.incr(key, callback, timeWindow, max);
      return;
    }
    let settled = false;
    const fallBack = (error: Error) => {
      settled = true;
      state.localUntil = Date.now() + localForMs;
      state.onFailure(error);
      this.local.incr(key, callback, timeWindow, max);
    };
    const timer = setTimeout(() => {
      if (!settled) fallBack(new Error(`Redis did not answer within ${deadlineMs} ms`));
    }, deadlineMs);
    this.remote.incr(
      key,
      (error, result) => {
        if (settled) return;
        clearTimeout(timer);
        if (error || !result) {
          fallBack(error ?? new Error('Redis gave no result'));
          return;
        }
        settled = true;
        // Keep the local count in step, so a fall-back starts from about where Redis was.
        this.local.incr(key, () => {}, timeWindow, max);
        callback(null, result);
      },
      timeWindow,
      max,
    );
  }

  child(routeOptions: RouteOptions): Store {
    return new FallbackStore(this.remote.child(routeOptions), this.local.child(routeOptions), this.options);
  }
}

/** A counter of requests per key and time window: @fastify/rate-limit's store interface. */
export type RateStore = Store;

/** Counts in this process only (the library's in-memory store: an LRU of 5,000 keys). */
export function localRateStore(): RateStore {
  return new LocalStore(false, false);
}

/** Counts in Redis while it answers within the deadline, in this process meanwhile. */
export function redisRateStore(options: FallbackOptions): RateStore {
  return new FallbackStore(new RedisStore(false, false, options.redis, options.nameSpace), localRateStore(), options);
}
