import type { FastifyRequest, onRequestHookHandler, onSendHookHandler } from 'fastify';
import { BusyError } from '../../lib/errors.ts';

// A submission with a 5 MiB screenshot is about 7 MB of JSON. Each one costs
// the process some 0.3 s of CPU in blocks of 35–150 ms (decoding the body,
// JSON.parse, the screenshot's pattern, and the driver's copies of the 7 MB
// parameter), and a pooled connection for as long as PostgreSQL takes to
// write 7.4 MB of WAL (0.5–2 s under load). Ten at once from ten addresses,
// each within its own rate limit, took the whole pool: /health answered 503
// and other requests failed (docs/feedback.md, "Screenshots and load").
//
// So at most `atOnce` large submissions per process are parsed, checked and
// written at a time. A slot is taken once the body has arrived, before it is
// decoded: a client that uploads slowly holds no slot while it does, and a
// refused body is never parsed. Smaller bodies (every submission without a
// screenshot) never wait for one.

/**
 * Larger than a submission without a screenshot needs: its text fields come to
 * some 11,600 characters, at most 35 kB as UTF-8. A body padded past this with
 * white space costs the parse as much as a screenshot does, and takes a slot too.
 */
export const LARGE_SUBMISSION_BYTES = 64 * 1024;

/**
 * How long a large submission waits for a slot before its 503. A held slot is
 * freed in 0.3–2 s, so a few honest submissions that arrive together all get
 * in; one that waits longer is behind a burst and is told to try again.
 */
export const SLOT_WAIT_MS = 3_000;

export const BUSY_MESSAGE = 'Too many submissions with screenshots at once; try again shortly';

type DoneFunction = (error: Error | null, body?: unknown) => void;
type BodyParser = (request: FastifyRequest, body: Buffer, done: DoneFunction) => void;

/**
 * A submit request's hold on a slot: released when its answer is sent (the
 * handler's insert done, or the error handler's refusal), not when its client
 * goes: a client that hangs up leaves its parse and insert running, and a slot
 * freed then let a burst of such clients past the bound.
 */
interface Ticket {
  closed: boolean;
  release?: () => void;
}

export interface ScreenshotSlots {
  /** onRequest hook of the routes whose large bodies take a slot. */
  watch: onRequestHookHandler;
  /** onSend hook of the same routes: their answer is ready, the work behind it done. */
  release: onSendHookHandler;
  /** `parse`, for a large body of a watched route only once it holds a slot. */
  parser(parse: BodyParser): BodyParser;
  /** Slots held, and submissions waiting for one (tests read them). */
  readonly inUse: number;
  readonly waiting: number;
}

export function createScreenshotSlots(atOnce: number, { waitMs = SLOT_WAIT_MS, waitingMax = atOnce } = {}): ScreenshotSlots {
  let inUse = 0;
  const line: Array<() => void> = [];
  const tickets = new WeakMap<FastifyRequest, Ticket>();

  /** A freed slot goes straight to the longest waiter, so none is overtaken by a newcomer. */
  function free() {
    const next = line.shift();
    if (next) next();
    else inUse -= 1;
  }

  /** Resolves true with a slot, false when none came in time or too many already wait. */
  function take(): Promise<boolean> {
    if (inUse < atOnce) {
      inUse += 1;
      return Promise.resolve(true);
    }
    // Each waiter holds its 7 MB body: the line is bounded too.
    if (line.length >= waitingMax) return Promise.resolve(false);
    return new Promise((resolve) => {
      const granted = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        line.splice(line.indexOf(granted), 1);
        resolve(false);
      }, waitMs);
      line.push(granted);
    });
  }

  const busy = () => new BusyError(BUSY_MESSAGE, `more than ${atOnce} large feedback submissions at once`);

  return {
    watch(request, reply, done) {
      const ticket: Ticket = { closed: false };
      tickets.set(request, ticket);
      // A client gone while its body waits for a slot gets no work done for it (parseInSlot).
      reply.raw.once('close', () => {
        ticket.closed = true;
      });
      done();
    },
    release(request, _reply, payload, done) {
      const ticket = tickets.get(request);
      ticket?.release?.();
      if (ticket) ticket.release = undefined;
      done(null, payload);
    },
    parser(parse) {
      return function parseInSlot(request, body, done) {
        const ticket = tickets.get(request);
        if (ticket === undefined || body.length <= LARGE_SUBMISSION_BYTES) return parse(request, body, done);
        void take().then((granted) => {
          if (!granted) return done(busy(), undefined);
          // The client left while it waited: nobody reads an answer, so no work is done for it.
          if (ticket.closed) {
            free();
            return done(busy(), undefined);
          }
          ticket.release = free;
          try {
            parse(request, body, done);
          } catch (error) {
            done(error as Error, undefined);
          }
        });
      };
    },
    get inUse() {
      return inUse;
    },
    get waiting() {
      return line.length;
    },
  };
}
