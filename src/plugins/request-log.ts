import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { LogFn } from 'pino';
import { redactUrl } from '../lib/redact.ts';

declare module 'fastify' {
  interface FastifyBaseLogger {
    http: LogFn;
    /** pino's own; skips building a line nobody writes. */
    isLevelEnabled(level: string): boolean;
  }
}

// A caller's request id is honoured only when it is short and plain, so it
// cannot smuggle text into the logs.
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFor(request: IncomingMessage): string {
  const incoming = request.headers['x-request-id'];
  return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
}

/** Returns the request id to the caller and writes one `http` line per request. */
export default fp(
  async function requestLogPlugin(app: FastifyInstance) {
    // Callback hooks, not async ones: these run on every request, and an async
    // hook costs a promise each time.
    app.addHook('onRequest', function returnRequestId(request, reply, done) {
      reply.header('x-request-id', request.id);
      done();
    });
    app.addHook('onResponse', function logRequest(request, reply, done) {
      if (request.log.isLevelEnabled('http')) {
        request.log.http(
          {
            method: request.method,
            url: redactUrl(request.url),
            route: request.routeOptions.url,
            statusCode: reply.statusCode,
            responseTimeMs: Math.round(reply.elapsedTime * 100) / 100,
            ip: request.ip,
          },
          'request completed',
        );
      }
      done();
    });
  },
  { name: 'request-log' },
);
