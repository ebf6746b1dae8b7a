import { STATUS_CODES } from 'node:http';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import FindMyWay from 'find-my-way';
import { hasZodFastifySchemaValidationErrors } from 'fastify-type-provider-zod';
import {
  AppError,
  BusyError,
  type FieldErrors,
  fromPostgresError,
  NotConfiguredError,
  RateLimitError,
  SERVICE_UNAVAILABLE_RETRY_AFTER_S,
  ShuttingDownError,
  UNSUPPORTED_CONTENT_TYPE,
} from '../lib/errors.ts';
import { redactUrl } from '../lib/redact.ts';
import { countAsRefusal } from './refusal-log.ts';
import { answeredOnConnection, userIdOf } from './request-log.ts';

// One error handler for the whole app, producing SPEC section 7 bodies:
// {success:false, error, statusCode, details? (400), requestId (5xx)}.

type ValidationIssue = { instancePath?: string; message?: string };

/** Field path to messages; an issue with the whole body (or query) is filed under its name, `body` or `querystring`. */
function detailsFrom(issues: ValidationIssue[], context: string | undefined): FieldErrors {
  const details: FieldErrors = {};
  for (const issue of issues) {
    const field = (issue.instancePath ?? '').replace(/^\//, '').replaceAll('/', '.') || context || 'body';
    (details[field] ??= []).push(issue.message ?? 'Invalid value');
  }
  return details;
}

/** What the client sees for an error: status, message and optional details. */
function describe(error: FastifyError | AppError | Error): { statusCode: number; message: string; details?: FieldErrors } {
  if (error instanceof AppError) return { statusCode: error.statusCode, message: error.message, details: error.details };
  if (hasZodFastifySchemaValidationErrors(error)) {
    return { statusCode: 400, message: 'Validation failed', details: detailsFrom(error.validation, error.validationContext) };
  }
  const fastifyError = error as FastifyError;
  if (fastifyError.validation) {
    return { statusCode: 400, message: 'Validation failed', details: detailsFrom(fastifyError.validation, fastifyError.validationContext) };
  }
  switch (fastifyError.code) {
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return { statusCode: 400, message: 'Malformed JSON in request body' };
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return { statusCode: 413, message: 'Request body too large' };
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return { statusCode: 415, message: UNSUPPORTED_CONTENT_TYPE };
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return { statusCode: 400, message: 'Invalid content length' };
    case 'FST_ERR_BAD_URL':
      return { statusCode: 400, message: 'Malformed URL' };
    case 'FST_ERR_MAX_PARAM_LENGTH':
      return { statusCode: 414, message: 'URI too long' };
  }
  // An error that carries its own 4xx is the client's, whatever its code: a
  // client that hangs up mid-body is Node's `aborted` with ECONNRESET, which is
  // not the database's connection reset. Database errors carry no statusCode.
  const status = fastifyError.statusCode;
  if (typeof status === 'number' && status >= 400 && status < 500) {
    return { statusCode: status, message: fastifyError.message };
  }
  const fromDb = fromPostgresError(error);
  if (fromDb) return { statusCode: fromDb.statusCode, message: fromDb.message };
  return { statusCode: 500, message: 'Internal server error' };
}

/** Sockets whose request was answered while its body was still arriving. */
const answeredMidBody = new WeakSet<Duplex>();

/** How much more of a refused body is read and dropped so that its sender reads the answer. */
export const REFUSED_BODY_DRAIN_BYTES = 64 * 1024 * 1024;

/**
 * A body refused while its client is still sending it (413 for its size, or
 * any other failure of Fastify's body reading): Fastify answers with
 * `Connection: close`, and Node closes the socket once the answer is
 * written, so a client still writing (fetch, a browser's upload of a 6 MB
 * screenshot) saw a broken connection (EPIPE) instead of the answer. The
 * rest of the body is read and dropped instead, and the connection stays
 * open for the next request; a body more than REFUSED_BODY_DRAIN_BYTES
 * larger, or announced so, is cut off as before.
 */
function dropRestOfBody(request: FastifyRequest, reply: FastifyReply) {
  const raw = request.raw;
  if (Number(raw.headers['content-length']) > REFUSED_BODY_DRAIN_BYTES) return;
  // The drain ends, at the latest, at the request deadline (REQUEST_TIMEOUT_MS),
  // where clientErrorHandler finds the socket here and only closes it.
  answeredMidBody.add(raw.socket);
  raw.once('end', () => answeredMidBody.delete(raw.socket));
  reply.removeHeader('connection');
  let dropped = 0;
  raw.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > REFUSED_BODY_DRAIN_BYTES) raw.socket.destroy();
  });
}

/**
 * What a failed or refused request's log line says of it besides its request id (request.log
 * adds that): enough to read alone, without the request's `http` line, which LOG_LEVEL=info drops.
 */
const whereAnswered = (request: FastifyRequest, statusCode: number) => ({ method: request.method, route: request.routeOptions.url, statusCode });

/** The client and the URL (redacted: an API key can be in it), for the refusals an operator blocks on: 429, 404, 405. */
const whoAskedWhat = (request: FastifyRequest) => ({ ip: request.ip, url: redactUrl(request.url) });

/**
 * The one warn line of a refused request. Refusals are stored only as counts
 * (plugins/refusal-log.ts): one row per hostile request would flood app_logs.
 */
function logRefusal(request: FastifyRequest, statusCode: number, error: string, more?: Record<string, unknown>) {
  request.log.warn({ ...whereAnswered(request, statusCode), error, ...more, persist: false }, 'request refused');
}

export async function errorHandler(error: FastifyError | Error, request: FastifyRequest, reply: FastifyReply) {
  const { statusCode, message, details } = describe(error);
  if (!request.raw.complete) dropRestOfBody(request, reply);
  // A shutdown's 503 comes with every deploy, a part left unconfigured's with every call, a busy
  // moment's with a burst of large submissions: refusals, not failures.
  const expected = error instanceof ShuttingDownError || error instanceof NotConfiguredError || error instanceof BusyError;
  if (statusCode >= 500 && !expected) request.log.error({ err: error, ...whereAnswered(request, statusCode), userId: userIdOf(request.caller) }, 'request failed');
  else if (error instanceof RateLimitError) logRefusal(request, statusCode, message, whoAskedWhat(request));
  else logRefusal(request, statusCode, message, error instanceof AppError && error.reason ? { reason: error.reason } : undefined);
  // Stored as a count a minute, as the 4xx are (plugins/refusal-log.ts): a flood of ingestion's
  // queue-full 503s stored one by one pushed the failures that said why out of app_logs.
  if (statusCode >= 500 && expected) countAsRefusal(request);
  // Our budgets' 429 and the auth server's alike: clients that back off read the header. No
  // cache may keep a refusal, and the limiter's comes before a scope's own no-store hook.
  if (error instanceof RateLimitError) reply.header('retry-after', error.retryAfter).header('cache-control', 'no-store');
  // A 503 is a part that is down or busy for a while (RFC 9110 15.6.4): clients and proxies that
  // retry wait this long, rather than meet a database or auth server coming back up with a burst.
  if (statusCode === 503) reply.header('retry-after', SERVICE_UNAVAILABLE_RETRY_AFTER_S);
  // The envelope is written as it is, never through the route's response schema for that
  // status: /api/admin/health declares its own 503 (the health report), and the auth guard's
  // 503 pushed through it failed to serialize and went out as a bare 500.
  // A serializer of our own sets no type (and a download route may have set its own).
  return reply.status(statusCode).type('application/json; charset=utf-8').serializer(JSON.stringify).send({
    success: false,
    error: message,
    statusCode,
    ...(details ? { details } : {}),
    ...(error instanceof RateLimitError ? { retryAfter: error.retryAfter } : {}),
    ...(statusCode >= 500 ? { requestId: request.id } : {}),
  });
}

/**
 * Fastify's `frameworkErrors`: a URL the router refuses (bad percent-encoding,
 * a path parameter over the length limit) is answered before any hook runs,
 * so the request id and `headersFor(origin)` (the security plugin's headers,
 * CORS included) are set here, as the hooks set them on every other answer.
 */
export function frameworkErrorHandler(headersFor: (origin: string | undefined) => Record<string, string>) {
  return function frameworkError(error: FastifyError, request: FastifyRequest, reply: FastifyReply) {
    reply.headers(headersFor(request.headers.origin)).header('x-request-id', request.id);
    return errorHandler(error, request, reply);
  };
}

/**
 * Requests Node's HTTP parser refuses never reach Fastify's hooks: a header
 * block past the size limit, a malformed request line or length, a request
 * too slow to arrive. Fastify's default answer has no `success` and names the
 * status as its error; this one is the same envelope as every other refusal,
 * with `headers` (the security plugin's `headersWithoutRequest`: CORS for
 * the front end, which otherwise read a 431 or 408 as a network error).
 */
/** The refusal count's key for requests the parser refused (plugins/refusal-log.ts): no route saw them. */
const PARSER_REFUSALS = '(refused by the HTTP parser)';

export function clientErrorHandler(headers: Record<string, string>) {
  const headerLines = Object.entries(headers)
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return function clientError(this: FastifyInstance, error: Error & { code?: string }, socket: Duplex) {
    // A reset connection has no one left to answer.
    if (error.code === 'ECONNRESET' || socket.destroyed) return;
    const [statusCode, message] =
      error.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? [408, 'Request timeout']
        : error.code === 'HPE_HEADER_OVERFLOW'
          ? [431, 'Request header fields too large']
          : [400, 'Malformed HTTP request'];
    // No route saw it, so neither the refusal count's hook (plugins/refusal-log.ts) nor the request metrics
    // do: counted here, under a key of its own. An oversized cookie that locks a user out shows there.
    // Each line is not stored: a flood of these must not fill app_logs.
    if (this.hasDecorator('countRefusal')) this.countRefusal(PARSER_REFUSALS, statusCode);
    if (this.hasDecorator('metrics')) this.metrics.dependencies.parserRefused(statusCode, error.code);
    this.log.warn({ statusCode, code: error.code, remoteAddress: (socket as { remoteAddress?: string }).remoteAddress, persist: false }, 'request refused by the HTTP parser');
    // A request already answered (the rest of a refused body still arriving at the
    // request deadline) is only cut: its client would read our bytes as the answer
    // to its next request.
    if (socket.writable && !answeredMidBody.has(socket)) {
      answeredOnConnection(socket, statusCode);
      const body = JSON.stringify({ success: false, error: message, statusCode });
      socket.write(
        `HTTP/1.1 ${statusCode} ${STATUS_CODES[statusCode]}\r\nContent-Type: application/json; charset=utf-8\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n${headerLines}Connection: close\r\n\r\n${body}`,
      );
    }
    socket.destroy(error);
  };
}

/**
 * How the app's router matches a path (app.ts gives it these); the 405 check
 * matches the same way. GET /api/users/email/:email takes an address of up to
 * 254 characters, and more once percent-encoded. A path answers with or
 * without a trailing slash, every route alike (README).
 */
export const PATH_MATCHING = { maxParamLength: 1024, ignoreTrailingSlash: true } as const;

/** The methods a route can answer; OPTIONS is left out, the CORS plugin answers it on every path. */
const ROUTE_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/** A request's path as the router matches it: no query, no trailing slash (PATH_MATCHING). */
function routedPath(url: string): string {
  const path = url.split('?')[0];
  return path.length > 1 && path.endsWith('/') ? path.slice(0, -1) : path;
}

function methodNotAllowed(reply: FastifyReply, method: string, path: string, allowed: readonly string[]) {
  // The answer names the path; the log line has the URL redacted.
  logRefusal(reply.request, 405, 'Method not allowed', { ...whoAskedWhat(reply.request), allowed });
  return reply
    .status(405)
    .header('allow', allowed.join(', '))
    .send({ success: false, error: `Method ${method} not allowed on ${path}; it answers ${allowed.join(', ')}`, statusCode: 405 });
}

/**
 * Every route's paths by method, in a router of their own (Fastify's answers
 * one method at a time): which methods a path has, when the one asked for
 * has none. It matches paths as the app's router does (PATH_MATCHING).
 *
 * A path written out whole (`/api/feedback/submit-feedback`, POST) is also a
 * value of a parameter for other methods (`GET /api/feedback/:id`), and the
 * router gives those to the parametric route: GET of the legacy submission
 * path answered 401, or as an admin 400 `Feedback id must be a UUID`. So a
 * parametric route first asks whether the request's path is one the app
 * writes out whole for other methods, and is then 405 with those methods.
 */
function routeMethods(app: FastifyInstance) {
  const router = FindMyWay({ ...PATH_MATCHING });
  const staticPaths = new Map<string, string[]>();
  const staticPathOfOtherMethods: onRequestHookHandler = (request, reply, done) => {
    const methods = staticPaths.get(routedPath(request.url));
    if (!methods || methods.includes(request.method)) return done();
    // Answered here, so the route's own hooks (a token check) and handler never run.
    void methodNotAllowed(reply, request.method, request.url.split('?')[0], methods);
  };
  app.addHook('onRoute', (route) => {
    // OPTIONS (the CORS plugin's preflight on every path) is neither counted nor checked.
    const methods = [route.method].flat().filter((method) => (ROUTE_METHODS as readonly string[]).includes(method));
    if (methods.length === 0) return;
    for (const method of methods) {
      if (!router.hasRoute(method as never, route.url)) router.on(method as never, route.url, () => {});
    }
    if (/[:*]/.test(route.url)) {
      route.onRequest = [staticPathOfOtherMethods, ...[route.onRequest ?? []].flat()];
    } else {
      const path = routedPath(route.url);
      staticPaths.set(path, ROUTE_METHODS.filter((method) => methods.includes(method) || staticPaths.get(path)?.includes(method)));
    }
  });
  // A path written out whole answers only its own methods: a parametric route that would take it
  // as a value refuses it (above), so naming that route's methods in Allow would send a client to a 405.
  return (path: string): string[] => staticPaths.get(routedPath(path)) ?? ROUTE_METHODS.filter((method) => router.find(method, path) !== null);
}

export default fp(
  async function errorsPlugin(app: FastifyInstance) {
    app.setErrorHandler(errorHandler);
    const methodsOf = routeMethods(app);
    // A path the app has, asked with a method it does not answer, is 405 with the methods it does
    // (RFC 9110 asks for Allow): a 404 for POST's GET sends the developer looking for a route that exists.
    // A route that answers the method and found nothing (callNotFound) is still 404.
    app.setNotFoundHandler(async (request, reply) => {
      const path = request.url.split('?')[0];
      const allowed = methodsOf(path);
      if (allowed.length > 0 && !allowed.includes(request.method)) return methodNotAllowed(reply, request.method, path, allowed);
      // What scanners ask for shows here, URL and client: no route's `http` line is needed to see it.
      logRefusal(request, 404, 'Route not found', whoAskedWhat(request));
      return reply.status(404).send({ success: false, error: `Route ${request.method} ${path} not found`, statusCode: 404 });
    });
  },
  { name: 'errors' },
);
