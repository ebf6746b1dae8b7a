import { createHash, timingSafeEqual } from 'node:crypto';
import { promisify } from 'node:util';
import { gzip as gzipCallback } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { credentialsRefused, withBearerChallenge } from '../lib/errors.ts';
import { bearerToken } from './auth.ts';
import { drawOn } from './rate-limit.ts';

// GET /metrics: the registry as Prometheus text, only for a scraper holding
// METRICS_TOKEN; without the variable the route does not exist.

function sameSecret(given: string, expected: string): boolean {
  const digest = (value: string) => createHash('sha256').update(value).digest();
  return timingSafeEqual(digest(given), digest(expected));
}

const gzip = promisify(gzipCallback);

/**
 * Whether an Accept-Encoding header takes gzip (by name or `*`, with a weight
 * above 0). Prometheus asks for it; the text shrinks about tenfold, as its
 * label sets repeat on every line.
 */
export function acceptsGzip(acceptEncoding: string | undefined): boolean {
  if (!acceptEncoding) return false;
  const weights = new Map<string, number>();
  for (const part of acceptEncoding.toLowerCase().split(',')) {
    const [name, ...parameters] = part.split(';').map((piece) => piece.trim());
    const q = parameters.map((parameter) => /^q=([01](?:\.\d{0,3})?)$/.exec(parameter)?.[1]).find((weight) => weight !== undefined);
    if (name) weights.set(name, q === undefined ? 1 : Number(q));
  }
  return (weights.get('gzip') ?? weights.get('*') ?? 0) > 0;
}

export function prometheusRoute(app: FastifyInstance, registry: Registry, token: string) {
  app.get('/metrics', { config: { rateLimit: false, metrics: false }, schema: { hide: true } }, async function scrapeMetrics(request, reply) {
    const given = bearerToken(request);
    if (!given || !sameSecret(given, token)) {
      // A scraper with the token is never limited; every wrong guess draws on the general budget.
      await drawOn(app.rateLimitGroups.general, request, reply);
      // RFC 6750's challenge, as the other Bearer routes send it: `invalid_token` only when a token came.
      throw withBearerChallenge(credentialsRefused(given ? 'not the METRICS_TOKEN' : 'no bearer token'), given ? 'invalid' : 'missing');
    }
    const text = await registry.metrics();
    // Added to what the CORS plugin put in Vary, not in its place.
    const vary = reply.getHeader('vary');
    reply.type(registry.contentType).header('vary', vary ? `${String(vary)}, Accept-Encoding` : 'Accept-Encoding');
    if (!acceptsGzip(request.headers['accept-encoding'])) return reply.send(text);
    return reply.header('content-encoding', 'gzip').send(await gzip(text));
  });
}
