import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { BUSY_MESSAGE, createScreenshotSlots, LARGE_SUBMISSION_BYTES } from './screenshot-slots.ts';

// The slots on their own: a request is a plain object, its response an emitter
// whose 'close' says the client has gone, as Node's and light-my-request's do;
// `answer` is the route's onSend, once the handler (or the error handler) is done.

const LARGE = Buffer.alloc(LARGE_SUBMISSION_BYTES + 1);
const SMALL = Buffer.alloc(LARGE_SUBMISSION_BYTES);

function harness(atOnce: number, options?: { waitMs?: number; waitingMax?: number }) {
  const slots = createScreenshotSlots(atOnce, options);
  const parsed: string[] = [];
  const parser = slots.parser((_request, body, done) => {
    parsed.push(`${body.length}`);
    done(null, {});
  });
  /** A watched request whose body arrives now; resolves with its parse's outcome; its client may go, its answer be sent. */
  function submit(body = LARGE, { watched = true } = {}) {
    const request = {} as FastifyRequest;
    const response = new EventEmitter();
    const reply = { raw: response } as unknown as FastifyReply;
    if (watched) slots.watch.call({} as never, request, reply, () => {});
    const outcome = new Promise<Error | null>((resolve) => parser(request, body, (error) => resolve(error)));
    const answer = () => slots.release.call({} as never, request, reply, '{}', () => {});
    return { outcome, close: () => response.emit('close'), answer };
  }
  return { slots, parsed, submit };
}

describe('screenshot slots', () => {
  it('parses at most atOnce large bodies at a time, hands a freed slot to the longest waiter, and lets small or unwatched bodies through', async () => {
    const { slots, parsed, submit } = harness(2, { waitMs: 10_000, waitingMax: 2 });
    const first = submit();
    const second = submit();
    expect(await first.outcome).toBeNull();
    expect(await second.outcome).toBeNull();
    const third = submit();
    const fourth = submit();
    expect(slots.inUse).toBe(2);
    expect(slots.waiting).toBe(2);
    // Neither waits: a body that needs no slot, and one of a route that takes none.
    expect(await submit(SMALL).outcome).toBeNull();
    expect(await submit(LARGE, { watched: false }).outcome).toBeNull();
    expect(parsed).toHaveLength(4);

    first.answer();
    expect(await third.outcome).toBeNull();
    expect(slots.waiting).toBe(1);
    second.answer();
    expect(await fourth.outcome).toBeNull();
    expect(slots.inUse).toBe(2);
    third.answer();
    fourth.answer();
    // Answering twice frees once.
    fourth.answer();
    expect(slots.inUse).toBe(0);
  });

  it('answers 503 at once when the line is full, and after waitMs when no slot came', async () => {
    const { slots, submit } = harness(1, { waitMs: 50, waitingMax: 1 });
    const holder = submit();
    await holder.outcome;
    const waiter = submit();
    const refused = await submit().outcome;
    expect(refused).toMatchObject({ statusCode: 503, message: BUSY_MESSAGE });
    expect(await waiter.outcome).toMatchObject({ statusCode: 503, message: BUSY_MESSAGE });
    expect(slots.waiting).toBe(0);
    holder.answer();
    expect(slots.inUse).toBe(0);
  });

  it('frees the slot a waiter is given when its client has already gone', async () => {
    const { slots, parsed, submit } = harness(1, { waitMs: 10_000 });
    const holder = submit();
    await holder.outcome;
    const waiter = submit();
    waiter.close();
    holder.answer();
    expect(await waiter.outcome).toMatchObject({ statusCode: 503 });
    expect(parsed).toHaveLength(1);
    expect(slots.inUse).toBe(0);
  });

  it('keeps the slot of a client that hung up until its answer is sent: the parse and insert go on without it', async () => {
    const { slots, submit } = harness(1, { waitMs: 10_000 });
    const holder = submit();
    await holder.outcome;
    holder.close();
    expect(slots.inUse).toBe(1);
    const next = submit();
    expect(slots.waiting).toBe(1);
    holder.answer();
    expect(await next.outcome).toBeNull();
    next.answer();
    expect(slots.inUse).toBe(0);
  });
});
