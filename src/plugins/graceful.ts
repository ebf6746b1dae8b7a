import type { FastifyInstance, FastifyReply } from 'fastify';
import fp from 'fastify-plugin';
import { ShuttingDownError } from '../lib/errors.ts';

// While the server closes, answers to requests already in flight carry
// `Connection: close`, so their keep-alive sockets end with them instead of
// holding the shutdown open until the keep-alive timeout.
//
// A streamed reply (a CSV download, the dashboard's event stream) may run far
// longer than the shutdown deadline, and the server only closes, and the
// onClose steps only run, once it has ended. So streamed replies are kept
// here, and the process (server.ts) cuts those still running when their share
// of the deadline is spent (lib/shutdown-budget.ts).
//
// A request that arrives on an open keep-alive connection once closing has
// begun is answered 503 here, as every error is (the envelope, a request id,
// CORS and security headers). Fastify's own answer (return503OnClosing) came
// before any hook: a bare `{"error":"Service Unavailable","message":…}`
// without them, which a front end read as a CORS failure.
//
// Node gives a request REQUEST_TIMEOUT_MS to arrive but no limit on its
// answer's way back: a client that stops reading held its socket, and the
// unsent part of the answer, for as long as the connection lived. An answer
// larger than LARGE_ANSWER_CHARS (a screenshot, a long page of a list) gets
// the same time to be taken in full and is cut after it; a smaller one fits in
// the sockets' buffers and is in the kernel's hands once written. Streamed
// replies have rules of their own (lib/csv.ts, the dashboard's event stream).

declare module 'fastify' {
  interface FastifyInstance {
    /** Destroys every streamed reply still being sent: its client sees a cut download, never a complete one. Returns how many. */
    cutStreamedReplies(reason: string): number;
    /** Withdrawn when a shutdown begins (server.ts): /health answers 503 from then on, while other requests are still served until the close. */
    readonly readiness: { withdrawn: boolean };
  }
}

const isStream = (payload: unknown) => typeof (payload as { pipe?: unknown } | null)?.pipe === 'function';

/** Characters (or bytes) above which an answer may not fit in the sockets' buffers at once. */
const LARGE_ANSWER_CHARS = 64 * 1024;

const sizeOf = (payload: unknown) =>
  typeof payload === 'string' ? payload.length : payload instanceof Uint8Array ? payload.byteLength : 0;

/** Cuts `reply`'s response, and its socket, if the client has not taken all of it within `timeoutMs`. */
function cutWhenNotTaken(reply: FastifyReply, timeoutMs: number) {
  const response = reply.raw;
  const timer = setTimeout(() => {
    if (response.writableFinished || response.destroyed) return;
    reply.log.warn({ timeoutMs }, 'answer cut: the client did not take it in time');
    response.destroy();
  }, timeoutMs).unref();
  const stop = () => clearTimeout(timer);
  response.once('finish', stop);
  response.once('close', stop);
}

export default fp(
  async function gracefulPlugin(app: FastifyInstance, { answerTimeoutMs }: { answerTimeoutMs: number }) {
    let closing = false;
    const streamed = new Set<FastifyReply>();
    const readiness = { withdrawn: false };
    app.decorate('readiness', readiness);
    app.addHook('preClose', async () => {
      closing = true;
      readiness.withdrawn = true;
    });
    // A callback hook, as every hook that runs on each request. app.ts registers
    // this plugin after the security plugin, so the answer has the request's id
    // and its CORS headers.
    app.addHook('onRequest', function refuseArrivalWhileClosing(_request, _reply, done) {
      if (closing) return done(new ShuttingDownError('Server is shutting down'));
      done();
    });
    // A callback hook: it runs on every answer, and an async onSend costs a promise each time.
    app.addHook('onSend', function watchAnswer(_request, reply, payload, done) {
      if (closing) reply.header('connection', 'close');
      if (isStream(payload)) {
        streamed.add(reply);
        reply.raw.once('close', () => streamed.delete(reply));
      } else if (sizeOf(payload) > LARGE_ANSWER_CHARS) {
        cutWhenNotTaken(reply, answerTimeoutMs);
      }
      done(null, payload);
    });
    app.decorate('cutStreamedReplies', function cutStreamedReplies(reason: string) {
      let cut = 0;
      for (const reply of streamed) {
        streamed.delete(reply);
        if (reply.raw.destroyed || reply.raw.writableFinished) continue;
        reply.log.warn(`streamed reply cut: ${reason}`);
        // The socket goes with it: a chunked reply ends without its last chunk, so the client sees it cut.
        reply.raw.destroy();
        cut += 1;
      }
      return cut;
    });
  },
  { name: 'graceful' },
);
