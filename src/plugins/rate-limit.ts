import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { Redis } from 'ioredis';
import { RateLimitError } from '../lib/errors.ts';
import type { Config } from '../config.ts';

// SPEC section 8. Every route gets the general budget unless it names a
// group of its own; a group is one limiter shared by all of its routes (sign
// up and sign in draw on one budget). With REDIS_URL the counters live in
// Redis, so every instance of the service sees the same counts.
//
// The limiter is one hook on the root instance, so it runs before every
// route's own onRequest hooks: a request is counted before any token, admin
// secret or API key is looked at, and a guess over budget costs no
// verification and no database work.

const MINUTE = 60_000;

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
      ? new Redis(config.REDIS_URL, { connectTimeout: 2_000, maxRetriesPerRequest: 1, enableOfflineQueue: true })
      : undefined;
    if (redis) {
      // While Redis is down every reconnect attempt errors; say so now and then, not each time.
      let lastWarned = 0;
      redis.on('error', (error: Error) => {
        if (Date.now() - lastWarned < 30_000) return;
        lastWarned = Date.now();
        app.log.warn({ err: error }, 'rate-limit store (Redis) unavailable: requests are let through uncounted');
      });
      app.addHook('onClose', async () => void (await redis.quit().catch(() => redis.disconnect())));
    }

    await app.register(rateLimit, {
      // No per-route hooks: the one root hook below counts every request first.
      global: false,
      max: config.RATE_LIMIT_GENERAL_PER_15MIN,
      timeWindow: 15 * MINUTE,
      redis,
      nameSpace: redisNamespace,
      // A Redis outage must not take the API down with it.
      skipOnError: true,
      keyGenerator: (request: FastifyRequest) => `general:${request.ip}`,
      errorResponseBuilder: (_request, context) => new RateLimitError(Math.max(1, Math.ceil(context.ttl / 1000))),
      // Output only: the 429 itself is counted with the other refusals (plugins/refusal-log.ts).
      onExceeded: (request) => request.log.warn({ ip: request.ip, url: request.url, persist: false }, 'rate limit exceeded'),
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
