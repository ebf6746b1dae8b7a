import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { Redis } from 'ioredis';
import { clientNetworkOf } from '../lib/client-network.ts';
import { RateLimitError } from '../lib/errors.ts';
import { type ExclusiveClaims, localClaims, redisClaims } from '../lib/exclusive-claims.ts';
import { type RateStore, localRateStore, redisRateStore } from '../lib/fallback-rate-store.ts';
import { RedisAvailability } from '../lib/redis-availability.ts';
import type { Config } from '../config.ts';

// SPEC section 8. Every route gets the general budget unless it names a
// group of its own; a group is one limiter shared by all of its routes (sign
// up and sign in draw on one budget; the other auth routes on another). With REDIS_URL the counters live in
// Redis, so every instance of the service sees the same counts; while Redis
// fails or stalls, each instance counts in its own memory instead
// (lib/fallback-rate-store.ts), so limits never open, and carries its counts
// back to Redis when Redis answers again. The same Redis holds
// the keys one request at a time may hold (lib/exclusive-claims.ts: the
// address of a reset under way), with the same fall-back.
//
// The limiter is one hook on the root instance, so it runs before every
// route's own onRequest hooks: a request is counted before any token, admin
// secret or API key is looked at, and a guess over budget costs no
// verification and no database work.
//
// The counting is @fastify/rate-limit's own stores (in memory, in Redis); the
// hook that draws on them is ours, a callback: it runs on every request, and
// the plugin's own handler made four promises a request even when the count
// is in memory and synchronous (docs/performance.md).

const MINUTE = 60_000;
/** After Redis fails or misses its deadline, how long counting stays in the process before Redis is asked again. */
const REDIS_RETRY_AFTER_MS = 5_000;
/** How long a claim outlives an instance that died holding it (the auth server's own reset window). */
const CLAIM_TTL_MS = MINUTE;

export type RateLimitGroup = 'auth' | 'passwordReset' | 'account' | 'feedback' | 'ingest';

declare module 'fastify' {
  interface FastifyInstance {
    /** Each group's limiter, and the general one (for routes that count only refused requests). */
    rateLimitGroups: Record<RateLimitGroup | 'general', Limiter>;
    /** The shared counters' store, for the health report: Redis's round trip in ms; undefined without REDIS_URL. */
    pingRateLimitStore(): Promise<number> | undefined;
    /** Keys one request at a time may hold, across instances while Redis answers (the reset's address). */
    exclusiveClaims: ExclusiveClaims;
    /** A counter of its own in the limits' store (Redis while it answers, else this process), for a budget a route counts itself. */
    newRateStore(): RateStore;
  }
  interface FastifyContextConfig {
    /** The budget this route draws on instead of the general one. */
    rateLimitGroup?: RateLimitGroup;
  }
}

export interface RateLimitOptions {
  /** Prefix of the Redis keys (default RATE_LIMIT_REDIS_PREFIX); tests give each app its own. */
  redisNamespace?: string;
}

/** Draws one request on a budget: `done()` when allowed, `done(429)` when over it (a callback onRequest hook). */
export type Limiter = (request: FastifyRequest, reply: FastifyReply, done: (error?: Error) => void) => void;

/**
 * One budget: `max` requests per `timeWindow` ms per client (an IPv4 address,
 * an IPv6 /64), counted in `store`; `refused` hears each request it refuses.
 */
function budget(name: RateLimitGroup | 'general', max: number, timeWindow: number, store: RateStore, refused: (group: string) => void): Limiter {
  return function drawOnBudget(request, reply, done) {
    store.incr(
      `${name}:${clientNetworkOf(request.ip)}`,
      (error, count) => {
        if (error || !count) return done(error ?? new Error('rate-limit store gave no count'));
        if (count.current <= max) return done();
        refused(name);
        const resetSeconds = Math.max(1, Math.ceil(count.ttl / 1000));
        // Retry-After and no-store come with every 429 from the error handler, and so does its one log line.
        reply.header('x-ratelimit-limit', max).header('x-ratelimit-remaining', 0).header('x-ratelimit-reset', resetSeconds);
        done(new RateLimitError(resetSeconds));
      },
      timeWindow,
      max,
    );
  };
}

export default fp<RateLimitOptions & { config: Config }>(
  async function rateLimitPlugin(app: FastifyInstance, { config, redisNamespace = config.RATE_LIMIT_REDIS_PREFIX }) {
    // Refusals by group and the store's fall-back go to /metrics (plugins/metrics.ts), where the app has them.
    const metrics = app.hasDecorator('metrics') ? app.metrics.dependencies : undefined;
    const refused = metrics ? metrics.rateLimitRefused : () => {};
    let newStore: () => RateStore = localRateStore;
    let ping: () => Promise<number> | undefined = () => undefined;
    let claims = localClaims();
    if (config.REDIS_URL) {
      const redis = new Redis(config.REDIS_URL, {
        connectTimeout: 2_000,
        commandTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
        maxRetriesPerRequest: 1,
        enableOfflineQueue: true,
      });
      // Each outage is said when it begins and when it ends, however soon
      // after the last; while it lasts every reconnect attempt errors, said
      // again at most every 30 s.
      let lastWarned = 0;
      const availability = new RedisAvailability({
        unavailable(error, outageBegins) {
          if (!outageBegins && Date.now() - lastWarned < 30_000) return;
          lastWarned = Date.now();
          app.log.warn({ err: error }, 'rate-limit store (Redis) unavailable: counting in this process meanwhile');
        },
        answersAgain() {
          app.log.info('rate-limit store (Redis) answers again: counting there');
        },
      });
      redis.on('error', (error: Error) => availability.onFailure(error));
      metrics?.watchRateLimitStore(() => availability.isDown);
      redis.on('ready', () => availability.onReady());
      // A Redis that never answers must not hold up closing either.
      app.addHook('onClose', async () => {
        const quit = redis.quit().catch(() => {});
        const timer = setTimeout(() => redis.disconnect(), config.REDIS_COMMAND_TIMEOUT_MS);
        await quit;
        clearTimeout(timer);
      });
      // Counts in Redis while it answers within the deadline; otherwise in this
      // process for a while (never uncounted), then asks Redis again.
      const fallback = {
        redis,
        nameSpace: redisNamespace,
        deadlineMs: config.REDIS_COMMAND_TIMEOUT_MS,
        localForMs: REDIS_RETRY_AFTER_MS,
        state: availability,
      };
      newStore = () => redisRateStore(fallback);
      claims = redisClaims({ ...fallback, ttlMs: CLAIM_TTL_MS });
      // Down, the API still counts (per instance); the health report says so rather than 503.
      ping = async () => {
        const started = performance.now();
        await redis.ping();
        return performance.now() - started;
      };
    }
    app.decorate('pingRateLimitStore', () => ping());
    app.decorate('exclusiveClaims', claims);
    app.decorate('newRateStore', () => newStore());

    const groups: Record<RateLimitGroup, Limiter> = {
      auth: budget('auth', config.RATE_LIMIT_AUTH_PER_MIN, MINUTE, newStore(), refused),
      passwordReset: budget('passwordReset', config.RATE_LIMIT_RESET_PER_MIN, MINUTE, newStore(), refused),
      account: budget('account', config.RATE_LIMIT_ACCOUNT_PER_MIN, MINUTE, newStore(), refused),
      feedback: budget('feedback', config.RATE_LIMIT_FEEDBACK_PER_15MIN, 15 * MINUTE, newStore(), refused),
      ingest: budget('ingest', config.RATE_LIMIT_INGEST_PER_15MIN, 15 * MINUTE, newStore(), refused),
    };
    const general = budget('general', config.RATE_LIMIT_GENERAL_PER_15MIN, 15 * MINUTE, newStore(), refused);
    app.decorate('rateLimitGroups', { ...groups, general });

    // Unknown routes are counted too (general budget): scanning costs budget.
    app.addHook('onRequest', function countRequest(request, reply, done) {
      const { rateLimit, rateLimitGroup } = request.routeOptions.config as { rateLimit?: unknown; rateLimitGroup?: RateLimitGroup };
      if (rateLimitGroup) return groups[rateLimitGroup](request, reply, done);
      // `rateLimit: false` without a group: exempt (GET /health; GET /metrics counts its own refusals).
      if (rateLimit === false) return done();
      general(request, reply, done);
    });
  },
  { name: 'rate-limit' },
);

/** Draws one request on a budget from inside a handler: resolves when allowed, rejects with the 429 when over it. */
export function drawOn(limiter: Limiter, request: FastifyRequest, reply: FastifyReply): Promise<void> {
  return new Promise((resolve, reject) => {
    limiter(request, reply, (error) => (error ? reject(error) : resolve()));
  });
}

/** Route options that put a route in a named group instead of the general budget. */
export function inRateLimitGroup(_app: FastifyInstance, name: RateLimitGroup) {
  return { config: { rateLimit: false as const, rateLimitGroup: name } };
}
