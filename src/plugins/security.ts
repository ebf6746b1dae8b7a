import cors from '@fastify/cors';
import helmet from '@fastify/helmet';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.ts';

// Security headers, and CORS for exactly one front-end origin with
// credentials; a request from any other origin gets no CORS headers at all.
//
// Two header sets. The HTML pages (the /admin/status dashboard and the /docs
// explorer) get helmet's full policy, which protects documents: scripts only
// from this origin, framing, DNS prefetch, opener isolation. Everything else
// is data (JSON, CSV, images, the tracker script), which a browser never runs
// as a page: it gets a short fixed set that forbids every use as a document.
// Built once, applied in one hook; helmet's eleven headers (900 bytes) on
// every JSON answer were the largest single cost of the plugin stack
// (docs/performance.md).

/** URL prefixes of the routes that serve HTML pages. */
export const PAGE_PREFIXES = ['/admin/status', '/docs'];

/** HSTS as helmet sends it: one year, subdomains included; production only (served over TLS). */
const HSTS = 'max-age=31536000; includeSubDomains';

/** The headers of every response that is not a page. */
export function dataHeaders(production: boolean): Record<string, string> {
  return {
    'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
    'cross-origin-resource-policy': 'same-origin',
    'referrer-policy': 'no-referrer',
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    ...(production ? { 'strict-transport-security': HSTS } : {}),
  };
}

const isPage = (url: string) => PAGE_PREFIXES.some((prefix) => url === prefix || url.startsWith(`${prefix}/`));

export default fp<{ config: Config }>(
  async function securityPlugin(app: FastifyInstance, { config }) {
    const production = config.NODE_ENV === 'production';
    // Registered before @fastify/helmet, so this runs before its own onRoute
    // hook turns `helmet` into the route's configuration.
    app.addHook('onRoute', (route) => {
      if (route.helmet === undefined && isPage(route.url)) route.helmet = {};
    });
    // global: false — helmet applies only to the routes marked above.
    await app.register(helmet, { global: false, hsts: production });

    const headers = dataHeaders(production);
    const applyDataHeaders: onRequestHookHandler = function applyDataHeaders(request, reply, done) {
      // @fastify/helmet keeps a page's policy in its route config.
      if ((request.routeOptions.config as { helmet?: unknown }).helmet === undefined) reply.headers(headers);
      done();
    };
    app.addHook('onRequest', applyDataHeaders);

    const allowedOrigin = new URL(config.CORS_ORIGIN).origin;
    await app.register(cors, {
      // false switches CORS off for the request: no Allow-Origin, no Allow-Credentials.
      origin: (origin, callback) => callback(null, origin === allowedOrigin),
      credentials: true,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS'],
      allowedHeaders: ['Authorization', 'Content-Type', 'X-Request-Id', 'X-API-Key'],
      exposedHeaders: ['X-Request-Id', 'Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset'],
      maxAge: 600,
    });
  },
  { name: 'security' },
);
