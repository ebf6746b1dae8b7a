import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { LogFn } from 'pino';
import { redactUrl } from '../lib/redact.ts';

declare module 'fastify' {
  interface FastifyBaseLogger {
    http: LogFn;
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
    app.addHook('onRequest', async (request, reply) => {
      reply.header('x-request-id', request.id);
    });
    app.addHook('onResponse', async (request, reply) => {
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
    });
  },
  { name: 'request-log' },
);
