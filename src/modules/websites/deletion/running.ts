import type { FastifyBaseLogger } from 'fastify';
import { settlesWithin } from '../../../lib/deadline.ts';

// The website deletions running in this process. Once the website is marked
// (hidden and keyless from that commit), its batches run as a task of the
// process, not of the request that asked: a request waits for them a bounded
// time (WEBSITE_DELETE_WAIT_MS) and answers 202 when they outlast it, so a
// large website's deletion no longer outlasts a proxy's timeout and comes back
// as a 502/504 while it goes on. A second request, or the worker's sweep, for a
// website whose deletion is running here joins it instead of starting another
// deleter beside it (the advisory lock of delete_website_batch would only make
// the two take turns).
//
// What no caller took is logged: a deletion that failed after its requests
// stopped waiting (error, with the website id; the website stays marked and
// the worker's next sweep or a DELETE finishes it), one finished after them
// (info), and one the shutdown stopped (info; the next start finishes it).

/** Deletes a marked website batch by batch, asking `stopped` between batches: true once it is gone, false when stopped first. */
export type FinishDeletion = (id: string, stopped: () => boolean) => Promise<boolean>;

/** How a wait for a deletion ended: it finished, or it goes on (it outlasted the wait, or the shutdown stopped it). */
export type DeletionOutcome = 'deleted' | 'under way';

interface RunningDeletion {
  readonly done: Promise<boolean>;
  /** Callers waiting for its outcome now; one that stopped waiting no longer counts. */
  waiting: number;
}

export function createRunningDeletions({ finish, log }: { finish: FinishDeletion; log: FastifyBaseLogger }) {
  const running = new Map<string, RunningDeletion>();
  let stopping = false;
  // Ends every wait at once when the shutdown begins: a request waiting for a batch held by a lock
  // would otherwise hold the server's close with it.
  let endWaits!: () => void;
  const waitsEnded = new Promise<'stopped'>((resolve) => (endWaits = () => resolve('stopped')));

  function start(id: string): RunningDeletion {
    const existing = running.get(id);
    if (existing) return existing;
    const startedAt = Date.now();
    const deletion: RunningDeletion = { done: finish(id, () => stopping).finally(() => running.delete(id)), waiting: 0 };
    running.set(id, deletion);
    // Registered before any waiter's, so it runs while a waiter that will take the outcome still counts.
    deletion.done.then(
      (finished) => {
        if (!finished) log.info({ websiteId: id }, 'website deletion stopped by the shutdown; it stays marked, and the next start finishes it');
        else if (deletion.waiting === 0) log.info({ websiteId: id, ms: Date.now() - startedAt }, 'website deletion finished in the background');
      },
      (error: unknown) => {
        if (deletion.waiting > 0) return;
        // Cut by the pool's close at the end of the shutdown's budget, or failed for good: marked either way.
        if (stopping) log.warn({ err: error, websiteId: id }, 'website deletion cut by the shutdown; it stays marked, and the next start finishes it');
        else log.error({ err: error, websiteId: id }, 'website deletion failed; it stays marked, and the next sweep or DELETE finishes it');
      },
    );
    return deletion;
  }

  /**
   * Starts the deletion of the marked website `id`, or joins the one running
   * here, and waits for it at most `waitMs` (0: not at all), and not past the
   * start of a shutdown. Throws its error when its retries gave up within the wait.
   */
  async function join(id: string, waitMs = Infinity): Promise<DeletionOutcome> {
    const deletion = start(id);
    if (waitMs <= 0) return 'under way';
    deletion.waiting += 1;
    let timer: NodeJS.Timeout | undefined;
    const waited = Number.isFinite(waitMs) ? [new Promise<'waited'>((resolve) => (timer = setTimeout(resolve, waitMs, 'waited')))] : [];
    try {
      const outcome = await Promise.race([deletion.done, waitsEnded, ...waited]);
      return outcome === true ? 'deleted' : 'under way';
    } finally {
      clearTimeout(timer);
      deletion.waiting -= 1;
    }
  }

  /** From now on every deletion stops after its current batch, and a new one stops before its first. */
  function stop() {
    stopping = true;
    endWaits();
  }

  /** Waits at most `timeoutMs` for the deletions running here to end; whether they all did. */
  async function settled(timeoutMs: number): Promise<boolean> {
    if (running.size === 0) return true;
    return settlesWithin(Promise.allSettled([...running.values()].map((deletion) => deletion.done)), timeoutMs);
  }

  return { join, stop, settled, isStopping: () => stopping };
}

export type RunningDeletions = ReturnType<typeof createRunningDeletions>;
