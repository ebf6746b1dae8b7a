import cors from '@fastify/cors';
import helmet from '@fastify/helmet';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.ts';
import { forbidden, withReason } from '../lib/errors.ts';

// Security headers, and CORS for exactly one front-end origin with
// credentials; a request from any other origin gets no CORS headers at all.
//
// Two header sets. The HTML pages (the /admin/status dashboard and the /docs
// explorer, registered in a scope of their own) get helmet's full policy,
// which protects documents: scripts only from this origin, framing, DNS
// prefetch, opener isolation. Everything else is data (JSON, CSV, images, the
// tracker script), which a browser never runs as a page: it gets a short
// fixed set that forbids every use as a document. Built once, applied in one
// hook; helmet's eleven headers (900 bytes) on every JSON answer were the
// largest single cost of the plugin stack (docs/performance.md).

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

/** What the front end's origin may read of an answer besides the body. */
// WWW-Authenticate: on a 401, whether the access token expired (refresh) or is refused for good (sign in).
// Idempotent-Replayed: a feedback submission's answer sent again for a retried Idempotency-Key.
const EXPOSED_HEADERS = [
  ...['X-Request-Id', 'Retry-After', 'X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'Content-Disposition', 'Allow', 'WWW-Authenticate'],
  'Idempotent-Replayed',
];

/**
 * The headers this plugin's hooks give an answer (the data set, CORS for the
 * front end's origin), for the few answers sent before any hook runs: a URL
 * the router refuses (app.ts, `frameworkErrors`). Without CORS, the front end
 * reads such a 400 or 414 as a network error, its message unreadable.
 */
export function headersBeforeRouting(config: Config): (origin: string | undefined) => Record<string, string> {
  const data = { ...dataHeaders(config.NODE_ENV === 'production'), vary: 'Origin' };
  const allowedOrigin = new URL(config.CORS_ORIGIN).origin;
  const withCors = {
    ...data,
    'access-control-allow-origin': allowedOrigin,
    'access-control-allow-credentials': 'true',
    'access-control-expose-headers': EXPOSED_HEADERS.join(', '),
  };
  return (origin) => (origin === allowedOrigin ? withCors : data);
}

/**
 * The headers of an answer written before Node has parsed the request (a 431
 * for headers too large, a 408 for a request too slow to arrive, a 400 for a
 * malformed one; plugins/errors.ts, clientErrorHandler): without CORS, the
 * front end read them as "Failed to fetch". There is no Origin to read (the
 * header block, if it arrived at all, is the parser's), so CORS for the front
 * end's origin goes on every such answer. That is safe because CORS_ORIGIN is
 * one origin (the configuration refuses a list): a page on any other origin
 * finds another origin named and is refused as before. The answer is a fixed
 * envelope with nothing of an account in it, sent with `Connection: close`,
 * and no cache may keep it.
 */
export function headersWithoutRequest(config: Config): Record<string, string> {
  return { ...headersBeforeRouting(config)(new URL(config.CORS_ORIGIN).origin), 'cache-control': 'no-store' };
}

/**
 * For a scope whose answers carry tokens or a person's account (the auth and
 * users routes): nothing on the way may keep them (RFC 6749 asks it of token
 * answers), nor the browser's back button show them after sign-out.
 */
export const noStore: onRequestHookHandler = function noStore(_request, reply, done) {
  reply.header('cache-control', 'no-store');
  done();
};

/**
 * Registered inside the scope that holds the HTML pages (app.ts): helmet's
 * full policy there, in place of the data set. An answer refused before the
 * page's own hooks run (a 429 from the rate limiter) is a JSON error, and
 * keeps the data set. Outside this scope helmet adds no hook at all.
 */
export const pageSecurityPlugin = fp<{ config: Config }>(
  async function pageSecurity(pages: FastifyInstance, { config }) {
    const production = config.NODE_ENV === 'production';
    const dataHeaderNames = Object.keys(dataHeaders(production));
    // Before helmet's own hooks: removeHeader also removes what helmet sets.
    pages.addHook('onRequest', function yieldToHelmet(_request, reply, done) {
      for (const name of dataHeaderNames) reply.removeHeader(name);
      done();
    });
    await pages.register(helmet, {
      hsts: production,
      // Like HSTS, production only: served over plain HTTP at any address but localhost (a dev
      // server on 0.0.0.0 opened from another machine), the browser fetched the pages' own
      // scripts and styles from https:// and showed a blank, unconnected page.
      contentSecurityPolicy: production ? true : { directives: { upgradeInsecureRequests: null } },
    });
  },
  { name: 'page-security' },
);

export default fp<{ config: Config }>(
  async function securityPlugin(app: FastifyInstance, { config }) {
    const headers = dataHeaders(config.NODE_ENV === 'production');
    const applyDataHeaders: onRequestHookHandler = function applyDataHeaders(_request, reply, done) {
      reply.headers(headers);
      done();
    };
    app.addHook('onRequest', applyDataHeaders);

    const allowedOrigin = new URL(config.CORS_ORIGIN).origin;
    await app.register(cors, {
      // false switches CORS off for the request: no Allow-Origin, no Allow-Credentials.
      origin: (origin, callback) => callback(null, origin === allowedOrigin),
      credentials: true,
      methods: ['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS'],
      // No allowedHeaders: the preflight allows the headers the front end asks for (and varies on
      // them). Only the one origin gets that answer, and the headers a trusted page sends are its
      // business; a fixed list refused every request of a front end whose HTTP client or error
      // tracker adds one of its own (sentry-trace, baggage, Cache-Control, X-Requested-With).
      // Content-Disposition: a front end that fetches an export (it needs the bearer token) reads the file name from it.
      exposedHeaders: EXPOSED_HEADERS,
      maxAge: 600,
      // The front end's OPTIONS without Access-Control-Request-Method (a monitor's, or the
      // request a page's fetch(…, {method: 'OPTIONS'}) sends after its preflight) was refused in
      // strict mode with a 400 in plain text, outside the envelope; it gets the preflight's 204.
      strictPreflight: false,
    });
    // A preflight from another origin (a front end on 127.0.0.1 when CORS_ORIGIN says localhost,
    // or on another port) fell through to a 404 `Route OPTIONS … not found`, which sent the
    // developer looking for a missing route. The browser refuses the call either way.
    app.addHook('onRequest', function refuseOtherOriginsPreflight(request, _reply, done) {
      const { origin } = request.headers;
      if (request.method === 'OPTIONS' && origin !== undefined && origin !== allowedOrigin && request.headers['access-control-request-method']) {
        // The log line names both origins, so a CORS_ORIGIN that is not the front end's shows there.
        const refused = forbidden('This origin may not call the API from a browser (CORS_ORIGIN)');
        return done(withReason(refused, `CORS_ORIGIN is ${allowedOrigin}; the preflight came from ${origin}`));
      }
      done();
    });
  },
  { name: 'security' },
);
