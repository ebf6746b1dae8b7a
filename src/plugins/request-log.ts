import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { LogFn } from 'pino';
import { redactUrl } from '../lib/redact.ts';
import type { Caller } from './auth.ts';

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

/**
 * Who made the request, for its line: the signed-in user's id, or the legacy
 * admin token's `legacy-admin:<userId>` (as the audit columns name it); never
 * an e-mail or a token. Undefined, and so left out of the line, for a request
 * nobody was authenticated on: an anonymous request pays one comparison.
 */
export const userIdOf = (caller: Caller | null) =>
  !caller ? undefined : caller.kind === 'legacy-admin' ? `legacy-admin:${caller.userId}` : caller.userId;

/** The reply in flight on a connection, and whether the connection is watched, for the one listener all connections share. */
const IN_FLIGHT = Symbol('reply in flight');
const WATCHED = Symbol('watched');
/** The status the server answered on the connection itself, past Fastify (clientErrorHandler's 408). */
const ANSWERED = Symbol('answered on the connection');
type Connection = Socket & { [IN_FLIGHT]?: FastifyReply; [WATCHED]?: true; [ANSWERED]?: number };

/**
 * The server answered `statusCode` on `connection` itself and closes it (a
 * request too slow to arrive: 408): the request in flight there is told of
 * with that status, not as one its client gave up on.
 */
export function answeredOnConnection(connection: object, statusCode: number): void {
  (connection as Connection)[ANSWERED] = statusCode;
}

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

    function logUnfinished(request: FastifyRequest, reply: FastifyReply, statusCode: number, why: string) {
      if (!request.log.isLevelEnabled('http')) return;
      request.log.http(
        {
          method: request.method,
          url: redactUrl(request.url),
          route: request.routeOptions.url,
          statusCode,
          responseTimeMs: roundedMs(reply.elapsedTime),
          ip: request.ip,
          userId: userIdOf(request.caller),
        },
        why,
      );
    }

    // A request whose answer never went out in full gets no onResponse: its
    // connection closed first (the client gave up, the shutdown closed it, a
    // download was cut). Watched on the connection, not the response: one
    // listener a connection, shared by every connection, where one on each
    // response cost about 3 µs a request (docs/performance.md). A connection
    // carries one request at a time (browsers do not pipeline; a pipelined
    // request's earlier ones are not told of). Fastify's onRequestAbort would
    // miss a request whose body had been read (a POST waiting on the
    // database): Node marks only one still being read as aborted.
    /** Why the answer on `connection` did not go out in full, and the status it is told of with. */
    function unfinished(connection: Connection, reply: FastifyReply): { statusCode: number; why: string } {
      const answered = connection[ANSWERED];
      if (answered !== undefined) return { statusCode: answered, why: answered === 408 ? 'request timed out before it arrived' : 'request refused before it arrived' };
      // An event stream (the dashboard's) ends when its client goes: that is how it ends, not a cut.
      if (String(reply.getHeader('content-type')).startsWith('text/event-stream')) return { statusCode: reply.statusCode, why: 'event stream closed by the client' };
      if (reply.raw.headersSent) return { statusCode: reply.statusCode, why: 'answer cut before its end' };
      if (closing) return { statusCode: CLIENT_CLOSED_REQUEST, why: 'request aborted: its connection was closed by the shutdown' };
      return { statusCode: CLIENT_CLOSED_REQUEST, why: 'request aborted by the client' };
    }

    function whenConnectionCloses(this: Connection) {
      const reply = this[IN_FLIGHT];
      // Taken off by onResponse: the answer was sent, and has its line and count.
      if (reply === undefined) return;
      this[IN_FLIGHT] = undefined;
      const { statusCode, why } = unfinished(this, reply);
      // An event listener's throw would end the process: no hook's error handling is around it.
      try {
        logUnfinished(reply.request, reply, statusCode, why);
        for (const listener of listeners) listener(reply.request, reply, statusCode);
      } catch (error) {
        reply.log.error({ err: error }, 'an unfinished response could not be logged or counted');
      }
    }

    // Callback hooks, not async ones: these run on every request, and an async
    // hook costs a promise each time.
    app.addHook('onRequest', function returnRequestId(request, reply, done) {
      reply.header('x-request-id', request.id);
      // inject() has a socket of its own making, which never closes.
      const connection = request.raw.socket as Connection | null;
      if (connection) {
        connection[IN_FLIGHT] = reply;
        if (connection[WATCHED] === undefined) {
          connection[WATCHED] = true;
          connection.on('close', whenConnectionCloses);
        }
      }
      done();
    });
    app.addHook('onResponse', function logRequest(request, reply, done) {
      const connection = request.raw.socket as Connection | null;
      if (connection?.[IN_FLIGHT] === reply) connection[IN_FLIGHT] = undefined;
      if (request.log.isLevelEnabled('http')) {
        request.log.http(
          {
            method: request.method,
            url: redactUrl(request.url),
            route: request.routeOptions.url,
            statusCode: reply.statusCode,
            responseTimeMs: roundedMs(reply.elapsedTime),
            ip: request.ip,
            userId: userIdOf(request.caller),
          },
          'request completed',
        );
      }
      done();
    });
  },
  { name: 'request-log' },
);
