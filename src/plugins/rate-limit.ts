import rateLimit from '@fastify/rate-limit';
import type { FastifyInstance, FastifyRequest, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { Redis } from 'ioredis';
import { RateLimitError } from '../lib/errors.ts';
import type { Config } from '../config.ts';

// SPEC section 8. Every route gets the general budget unless it names a
// group of its own; a group is one limiter shared by all of its routes (sign
// up and sign in draw on one budget). With REDIS_URL the counters live in
// Redis, so every instance of the service sees the same counts.

const MINUTE = 60_000;

export type RateLimitGroup = 'auth' | 'passwordReset' | 'feedback';

declare module 'fastify' {
  interface FastifyInstance {
    rateLimitGroups: Record<RateLimitGroup, onRequestHookHandler>;
  }
}

export interface RateLimitOptions {
  /** Prefix of the Redis keys (default RATE_LIMIT_REDIS_PREFIX); tests give each app its own. */
  redisNamespace?: string;
}

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
      global: true,
      max: config.RATE_LIMIT_GENERAL_PER_15MIN,
      timeWindow: 15 * MINUTE,
      redis,
      nameSpace: redisNamespace,
      // A Redis outage must not take the API down with it.
      skipOnError: true,
      keyGenerator: (request: FastifyRequest) => `general:${request.ip}`,
      errorResponseBuilder: (_request, context) => new RateLimitError(Math.max(1, Math.ceil(context.ttl / 1000))),
      onExceeded: (request) => request.log.warn({ ip: request.ip, url: request.url }, 'rate limit exceeded'),
    });

    const group = (name: RateLimitGroup, max: number, timeWindow: number) =>
      app.rateLimit({ max, timeWindow, keyGenerator: (request: FastifyRequest) => `${name}:${request.ip}` });

    app.decorate('rateLimitGroups', {
      auth: group('auth', config.RATE_LIMIT_AUTH_PER_MIN, MINUTE),
      passwordReset: group('passwordReset', config.RATE_LIMIT_RESET_PER_MIN, MINUTE),
      feedback: group('feedback', config.RATE_LIMIT_FEEDBACK_PER_15MIN, 15 * MINUTE),
    });
  },
  { name: 'rate-limit' },
);

/** Route options that put a route in a named group instead of the general budget. */
export function inRateLimitGroup(app: FastifyInstance, name: RateLimitGroup) {
  return { config: { rateLimit: false as const }, onRequest: app.rateLimitGroups[name] };
}
