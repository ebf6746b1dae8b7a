import { setTimeout as sleep } from 'node:timers/promises';

// Group commit: callers wait for the batch that carries their item. A batch
// is written when it is full (maxRows) or its first item has waited
// maxWaitMs, whichever comes first (or sooner when nothing else is on its way:
// `itemsInHand`), with at most maxInFlight batches being written at once;
// items that arrive meanwhile form the next batch. A failed batch fails
// exactly its own callers.
//
// The end of a write does not start the next batch early: items queued during
// it still wait out their first item's maxWaitMs. Started at once, batches
// under a steady load were as small as writes were short (one or two events
// at 1,000 a second), each paying a transaction and the rollups' fixed work:
// PostgreSQL spent two thirds more per event than with batches that wait
// (docs/performance.md).

export interface GroupCommitOptions<T, R> {
  maxRows: number;
  maxWaitMs: number;
  maxInFlight: number;
  /** Items waiting beyond this are refused at once (backpressure). */
  queueMax: number;
  /**
   * An item still queued (no batch has taken it) after this long is refused:
   * when every batch slot is held by a slow write, callers hear so in bounded
   * time, and a refused item is certain not to be written.
   */
  maxQueueWaitMs?: number;
  /**
   * How many items the caller has in hand: added, or on their way to being
   * added (for ingestion, the requests in flight). When every one of them is
   * queued or being written and at least `EARLY_BATCH_ROWS` are queued, waiting
   * longer cannot grow the batch, so it starts without waiting out maxWaitMs.
   */
  itemsInHand?: () => number;
  /** Writes one batch (one transaction) and returns each item's result, in order. */
  write(items: T[]): Promise<R[]>;
}

/**
 * The least a batch need hold to start before its wait is out: the batch's
 * fixed cost (a transaction, the rollups' fixed statements: about 1 ms) over
 * 32 events is under the 40 µs each costs on its own (docs/performance.md).
 * Below it, the wait gathers companions as before.
 */
export const EARLY_BATCH_ROWS = 32;

export class QueueFullError extends Error {}
export class QueueTimeoutError extends Error {}
export class ClosedError extends Error {}

interface Waiting<T, R> {
  item: T;
  queuedAt: number;
  resolve(result: R): void;
  reject(error: unknown): void;
}

export function createGroupCommit<T, R>(options: GroupCommitOptions<T, R>) {
  const queue: Waiting<T, R>[] = [];
  let timer: NodeJS.Timeout | undefined;
  let inFlight = 0;
  let draining = false;
  let closed = false;
  // Batches being written, so that abandon() can answer their callers.
  const writing = new Set<Waiting<T, R>[]>();
  let itemsWriting = 0;
  let sweeper: NodeJS.Timeout | undefined;

  /** Refuses the items that have waited too long; the queue is in arrival order, so they are at its head. */
  function sweep() {
    sweeper = undefined;
    const maxWait = options.maxQueueWaitMs;
    if (maxWait === undefined) return;
    const oldest = performance.now() - maxWait;
    let expired = 0;
    while (expired < queue.length && queue[expired].queuedAt <= oldest) expired += 1;
    for (const waiting of queue.splice(0, expired)) waiting.reject(new QueueTimeoutError('no batch took the item in time'));
    if (queue.length > 0) sweeper = setTimeout(sweep, Math.max(1, queue[0].queuedAt + maxWait - performance.now())).unref();
  }

  function startBatches() {
    if (timer) {
      clearTimeout(timer);
      timer = undefined;
    }
    while (inFlight < options.maxInFlight && queue.length > 0) {
      const batch = queue.splice(0, options.maxRows);
      inFlight += 1;
      void writeBatch(batch);
    }
  }

  async function writeBatch(batch: Waiting<T, R>[]) {
    writing.add(batch);
    itemsWriting += batch.length;
    try {
      const results = await options.write(batch.map((waiting) => waiting.item));
      batch.forEach((waiting, index) => waiting.resolve(results[index]));
    } catch (error) {
      for (const waiting of batch) waiting.reject(error);
    } finally {
      writing.delete(batch);
      itemsWriting -= batch.length;
      inFlight -= 1;
      startWhenDue();
    }
  }

  /** The queue can go without waiting for its first item's maxWaitMs: full, draining, or nothing else on its way. */
  function readyNow(): boolean {
    if (draining || queue.length >= options.maxRows) return true;
    return queue.length >= EARLY_BATCH_ROWS && options.itemsInHand !== undefined && options.itemsInHand() <= queue.length + itemsWriting;
  }

  /** After a write: what queued up meanwhile goes once ready or once its first item has waited maxWaitMs. */
  function startWhenDue() {
    if (queue.length === 0) return;
    const waitLeft = queue[0].queuedAt + options.maxWaitMs - performance.now();
    if (waitLeft <= 0 || readyNow()) {
      startBatches();
      return;
    }
    clearTimeout(timer);
    timer = setTimeout(startBatches, Math.ceil(waitLeft));
  }

  function schedule() {
    if (inFlight < options.maxInFlight && readyNow()) startBatches();
    else timer ??= setTimeout(startBatches, options.maxWaitMs);
  }

  return {
    /** Resolves once the batch carrying `item` is committed. */
    add(item: T): Promise<R> {
      if (closed) return Promise.reject(new ClosedError('no longer accepting items'));
      if (queue.length >= options.queueMax) return Promise.reject(new QueueFullError('too many items waiting'));
      return new Promise<R>((resolve, reject) => {
        queue.push({ item, queuedAt: performance.now(), resolve, reject });
        if (options.maxQueueWaitMs !== undefined) sweeper ??= setTimeout(sweep, options.maxQueueWaitMs).unref();
        schedule();
      });
    },

    /**
     * Writes everything queued, at once and until `settled()` (e.g. no
     * request in flight) holds with nothing queued or being written; then
     * refuses new items. Items still queued after `timeoutMs` are refused.
     */
    async drain({ settled = () => true, timeoutMs = 30_000 }: { settled?: () => boolean; timeoutMs?: number } = {}) {
      draining = true;
      const deadline = Date.now() + timeoutMs;
      while (!(queue.length === 0 && inFlight === 0 && settled()) && Date.now() < deadline) {
        startBatches();
        await sleep(1);
      }
      closed = true;
      clearTimeout(sweeper);
      for (const waiting of queue.splice(0)) waiting.reject(new ClosedError('closed before the item was written'));
    },

    /**
     * Gives up: refuses new items and answers every caller still waiting,
     * queued or in a batch being written, with `error`. A batch that commits
     * later stores its items anyway; nobody was told they were stored.
     */
    abandon(error: Error) {
      closed = true;
      clearTimeout(sweeper);
      for (const waiting of queue.splice(0)) waiting.reject(error);
      for (const batch of writing) for (const waiting of batch) waiting.reject(error);
    },

    stats: () => ({ queued: queue.length, inFlight }),
  };
}

export type GroupCommit<T, R> = ReturnType<typeof createGroupCommit<T, R>>;
