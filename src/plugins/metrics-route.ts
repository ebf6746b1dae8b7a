import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { credentialsRefused } from '../lib/errors.ts';
import { bearerToken } from './auth.ts';
import { drawOn } from './rate-limit.ts';

// GET /metrics: the registry as Prometheus text, only for a scraper holding
// METRICS_TOKEN; without the variable the route does not exist.

function sameSecret(given: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

export function prometheusRoute(app: FastifyInstance, registry: Registry, token: string) {
  app.get('/metrics', { config: { rateLimit: false, metrics: false }, schema: { hide: true } }, async function scrapeMetrics(request, reply) {
    const given = bearerToken(request);
    if (!given || !sameSecret(given, token)) {
      // A scraper with the token is never limited; every wrong guess draws on the general budget.
      await drawOn(app.rateLimitGroups.general, request, reply);
      throw credentialsRefused(given ? 'not the METRICS_TOKEN' : 'no bearer token');
    }
    return reply.type(registry.contentType).send(await registry.metrics());
  });
}
