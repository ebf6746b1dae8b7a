import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { Redis } from 'ioredis';
import { RateLimitError } from '../lib/errors.ts';
import { fallbackStoreClass } from '../lib/fallback-rate-store.ts';
import { redactUrl } from '../lib/redact.ts';
import type { Config } from '../config.ts';

// SPEC section 8. Every route gets the general budget unless it names a
// group of its own; a group is one limiter shared by all of its routes (sign
// up and sign in draw on one budget). With REDIS_URL the counters live in
// Redis, so every instance of the service sees the same counts; while Redis
// fails or stalls, each instance counts in its own memory instead
// (lib/fallback-rate-store.ts), so limits never open.
//
// The limiter is one hook on the root instance, so it runs before every
// route's own onRequest hooks: a request is counted before any token, admin
// secret or API key is looked at, and a guess over budget costs no
// verification and no database work.

const MINUTE = 60_000;
/** After Redis fails or misses its deadline, how long counting stays in the process before Redis is asked again. */
const REDIS_RETRY_AFTER_MS = 5_000;

export type RateLimitGroup = 'auth' | 'passwordReset' | 'feedback' | 'ingest';

declare module 'fastify' {
  interface FastifyInstance {
    /** Each group's limiter, and the general one (for routes that count only refused requests). */
    rateLimitGroups: Record<RateLimitGroup | 'general', onRequestHookHandler>;
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

type Limiter = (request: FastifyRequest, reply: FastifyReply) => Promise<void>;

export default fp<RateLimitOptions & { config: Config }>(
  async function rateLimitPlugin(app: FastifyInstance, { config, redisNamespace = config.RATE_LIMIT_REDIS_PREFIX }) {
    const redis = config.REDIS_URL
      ? new Redis(config.REDIS_URL, {
          connectTimeout: 2_000,
          commandTimeout: config.REDIS_COMMAND_TIMEOUT_MS,
          maxRetriesPerRequest: 1,
          enableOfflineQueue: true,
        })
      : undefined;
    let store;
    if (redis) {
      // While Redis is down every reconnect attempt errors; say so now and then, not each time.
      let lastWarned = 0;
      const warn = (error: Error) => {
        if (Date.now() - lastWarned < 30_000) return;
        lastWarned = Date.now();
        app.log.warn({ err: error }, 'rate-limit store (Redis) unavailable: counting in this process meanwhile');
      };
      redis.on('error', warn);
      // A Redis that never answers must not hold up closing either.
      app.addHook('onClose', async () => {
        const quit = redis.quit().catch(() => {});
        const timer = setTimeout(() => redis.disconnect(), config.REDIS_COMMAND_TIMEOUT_MS);
        await quit;
        clearTimeout(timer);
      });
      // Counts in Redis while it answers within the deadline; otherwise in this
      // process for a while (never uncounted), then asks Redis again.
      store = fallbackStoreClass({
        redis,
        nameSpace: redisNamespace,
        deadlineMs: config.REDIS_COMMAND_TIMEOUT_MS,
        localForMs: REDIS_RETRY_AFTER_MS,
        state: { localUntil: 0, onFailure: warn },
      });
    }

    await app.register(rateLimit, {
      // No per-route hooks: the one root hook below counts every request first.
      global: false,
      max: config.RATE_LIMIT_GENERAL_PER_15MIN,
      timeWindow: 15 * MINUTE,
      store,
      // The store never fails (it falls back to counting in the process); were it to, refuse nothing silently.
      skipOnError: false,
      keyGenerator: (request: FastifyRequest) => `general:${request.ip}`,
      errorResponseBuilder: (_request, context) => new RateLimitError(Math.max(1, Math.ceil(context.ttl / 1000))),
      // Output only: the 429 itself is counted with the other refusals (plugins/refusal-log.ts).
      onExceeded: (request) => request.log.warn({ ip: request.ip, url: redactUrl(request.url), persist: false }, 'rate limit exceeded'),
    });

    const limiter = (name: RateLimitGroup | 'general', max: number, timeWindow: number) =>
      app.rateLimit({ max, timeWindow, keyGenerator: (request: FastifyRequest) => `${name}:${request.ip}` }) as unknown as Limiter;

    const groups: Record<RateLimitGroup, Limiter> = {
      auth: limiter('auth', config.RATE_LIMIT_AUTH_PER_MIN, MINUTE),
      passwordReset: limiter('passwordReset', config.RATE_LIMIT_RESET_PER_MIN, MINUTE),
      feedback: limiter('feedback', config.RATE_LIMIT_FEEDBACK_PER_15MIN, 15 * MINUTE),
      ingest: limiter('ingest', config.RATE_LIMIT_INGEST_PER_15MIN, 15 * MINUTE),
    };
    const general = limiter('general', config.RATE_LIMIT_GENERAL_PER_15MIN, 15 * MINUTE);
    app.decorate('rateLimitGroups', { ...groups, general } as Record<RateLimitGroup | 'general', onRequestHookHandler>);

    // Unknown routes are counted too (general budget): scanning costs budget.
    app.addHook('onRequest', async function countRequest(request, reply) {
      const { rateLimit: routeLimit, rateLimitGroup } = request.routeOptions.config as {
        rateLimit?: unknown;
        rateLimitGroup?: RateLimitGroup;
      };
      if (rateLimitGroup) return groups[rateLimitGroup](request, reply);
      // `rateLimit: false` without a group: exempt (GET /health; GET /metrics counts its own refusals).
      if (routeLimit === false) return;
      return general(request, reply);
    });
  },
  { name: 'rate-limit' },
);

/** Route options that put a route in a named group instead of the general budget. */
export function inRateLimitGroup(_app: FastifyInstance, name: RateLimitGroup) {
  return { config: { rateLimit: false as const, rateLimitGroup: name } };
}
