import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { LogFn } from 'pino';
import { redactUrl } from '../lib/redact.ts';

declare module 'fastify' {
  interface FastifyBaseLogger {
    http: LogFn;
    /** pino's own; skips building a line nobody writes. */
    isLevelEnabled(level: string): boolean;
  }
  interface FastifyInstance {
    /**
     * Calls `listener` for each request whose response closed before it was
     * sent in full, for which Fastify runs no onResponse hook: the client gave
     * up waiting, the shutdown closed its connection, a download was cut.
     */
    onUnfinishedResponse(listener: UnfinishedResponseListener): void;
  }
}

/** `statusCode`: the answer's, or CLIENT_CLOSED_REQUEST when none had begun. */
export type UnfinishedResponseListener = (request: FastifyRequest, reply: FastifyReply, statusCode: number) => void;

/**
 * The status of a request whose connection closed before its answer began
 * (nginx's "client closed request"), in its `http` line and the metrics.
 */
export const CLIENT_CLOSED_REQUEST = 499;

// A caller's request id is honoured only when it is short and plain, so it
// cannot smuggle text into the logs.
const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export function requestIdFor(request: IncomingMessage): string {
  const incoming = request.headers['x-request-id'];
  return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
}

const roundedMs = (ms: number) => Math.round(ms * 100) / 100;

/** The reply a response belongs to, for the one listener all responses share. */
const REPLY = Symbol('reply');
type ResponseOfReply = ServerResponse & { [REPLY]?: FastifyReply };

/**
 * Returns the request id to the caller and writes one `http` line per request:
 * `request completed` once its answer is sent, else a line saying why not when
 * its response closes (`request aborted by the client`, …).
 */
export default fp(
  async function requestLogPlugin(app: FastifyInstance) {
    let closing = false;
    app.addHook('preClose', async () => {
      closing = true;
    });
    const listeners: UnfinishedResponseListener[] = [];
    app.decorate('onUnfinishedResponse', (listener: UnfinishedResponseListener) => void listeners.push(listener));

    function logUnfinished(request: FastifyRequest, reply: FastifyReply, statusCode: number, begun: boolean) {
      if (!request.log.isLevelEnabled('http')) return;
      const msg = begun
        ? 'answer cut before its end'
        : closing
          ? 'request aborted: its connection was closed by the shutdown'
          : 'request aborted by the client';
      request.log.http(
        {
          method: request.method,
          url: redactUrl(request.url),
          route: request.routeOptions.url,
          statusCode,
          responseTimeMs: roundedMs(reply.elapsedTime),
          ip: request.ip,
        },
        msg,
      );
    }

    // One function for every response, not a closure each: 'close' comes once
    // per response, sent or not, and costs a check when it was sent. Fastify's
    // onRequestAbort would miss a request whose body had been read (a POST
    // waiting on the database): Node marks only one still being read as aborted.
    function whenResponseCloses(this: ResponseOfReply) {
      const reply = this[REPLY];
      // Taken off by onResponse: the answer was sent, and has its line and count.
      if (reply === undefined) return;
      const begun = this.headersSent;
      const statusCode = begun ? reply.statusCode : CLIENT_CLOSED_REQUEST;
      // An event listener's throw would end the process: no hook's error handling is around it.
      try {
        logUnfinished(reply.request, reply, statusCode, begun);
        for (const listener of listeners) listener(reply.request, reply, statusCode);
      } catch (error) {
        reply.log.error({ err: error }, 'an unfinished response could not be logged or counted');
      }
    }

    // Callback hooks, not async ones: these run on every request, and an async
    // hook costs a promise each time.
    app.addHook('onRequest', function returnRequestId(request, reply, done) {
      reply.header('x-request-id', request.id);
      const response: ResponseOfReply = reply.raw;
      response[REPLY] = reply;
      response.on('close', whenResponseCloses);
      done();
    });
    app.addHook('onResponse', function logRequest(request, reply, done) {
      (reply.raw as ResponseOfReply)[REPLY] = undefined;
      if (request.log.isLevelEnabled('http')) {
        request.log.http(
          {
            method: request.method,
            url: redactUrl(request.url),
            route: request.routeOptions.url,
            statusCode: reply.statusCode,
            responseTimeMs: roundedMs(reply.elapsedTime),
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
