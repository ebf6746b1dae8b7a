import { EventEmitter } from 'node:events';
import type { FastifyReply, FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { BUSY_MESSAGE, createScreenshotSlots, LARGE_SUBMISSION_BYTES } from './screenshot-slots.ts';

// The slots on their own: a request is a plain object, its response an emitter
// whose 'close' ends the request, as Node's and light-my-request's do.

const LARGE = Buffer.alloc(LARGE_SUBMISSION_BYTES + 1);
const SMALL = Buffer.alloc(LARGE_SUBMISSION_BYTES);

function harness(atOnce: number, options?: { waitMs?: number; waitingMax?: number }) {
  const slots = createScreenshotSlots(atOnce, options);
  const parsed: string[] = [];
  const parser = slots.parser((_request, body, done) => {
    parsed.push(`${body.length}`);
    done(null, {});
  });
  /** A watched request whose body arrives now; resolves with its parse's outcome, and closes its response. */
  function submit(body = LARGE, { watched = true } = {}) {
    const request = {} as FastifyRequest;
    const response = new EventEmitter();
    if (watched) slots.watch.call({} as never, request, { raw: response } as unknown as FastifyReply, () => {});
    const outcome = new Promise<Error | null>((resolve) => parser(request, body, (error) => resolve(error)));
    return { outcome, close: () => response.emit('close') };
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

    first.close();
    expect(await third.outcome).toBeNull();
    expect(slots.waiting).toBe(1);
    second.close();
    expect(await fourth.outcome).toBeNull();
    expect(slots.inUse).toBe(2);
    third.close();
    fourth.close();
    // Closing twice frees once.
    fourth.close();
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
    holder.close();
    expect(slots.inUse).toBe(0);
  });

  it('frees the slot a waiter is given when its client has already gone', async () => {
    const { slots, parsed, submit } = harness(1, { waitMs: 10_000 });
    const holder = submit();
    await holder.outcome;
    const waiter = submit();
    waiter.close();
    holder.close();
    expect(await waiter.outcome).toMatchObject({ statusCode: 503 });
    expect(parsed).toHaveLength(1);
    expect(slots.inUse).toBe(0);
  });
});
