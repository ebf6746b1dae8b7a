import type { FastifyInstance, FastifyReply } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../config.ts';
import { BusyError, errorCode, serviceUnavailable, ShuttingDownError, withCause } from '../../lib/errors.ts';
import { shutdownBudget } from '../../lib/shutdown-budget.ts';
import { ClosedError, createGroupCommit, QueueFullError, QueueTimeoutError } from './group-commit.ts';
import { type EventRow, insertEventBatchQueryElevated, storedIds } from './ingest-queries.ts';

// The ingestion write path: events are written by group commit, one
// multi-row INSERT per batch, and a request is answered only after the batch
// carrying its event has committed. On close the plugin writes whatever is
// queued and waits for ingestion requests still in flight before the
// database pool closes (child onClose hooks run before the db plugin's).
// A batch that fails on one row's data is written again one row at a time,
// so one bad event costs its own request (400), not its neighbours'.

/** What the database named when it refused a row's own data: its code and constraint say what to fix. */
export interface RowRefusal {
  code?: string;
  constraint?: string;
  column?: string;
}
/** `refused`: the database refused the row's own data (nothing stored). */
export type RecordOutcome = 'stored' | 'unknown-website' | { refused: RowRefusal };
/** A row of a batch written one row at a time whose turn never came, the database having failed first (`cause`). */
class NotWritten {
  readonly cause: unknown;
  constructor(cause: unknown) {
    this.cause = cause;
  }
}
type RowOutcome = RecordOutcome | NotWritten;

export interface AnalyticsBatcher {
  /** Resolves after commit, or once the row is refused; rejects with 503 when the batch fails or the queue is full. */
  record(row: EventRow): Promise<RecordOutcome>;
  /** Counts an ingestion request as in flight until its response closes (sent, or the client gone), so closing waits for it. */
  admit(reply: FastifyReply): void;
}

declare module 'fastify' {
  interface FastifyInstance {
    analyticsBatcher: AnalyticsBatcher;
  }
}

// Deadlock or serialization failure: a second attempt can get past it.
const CONFLICT = new Set(['40P01', '40001']);

// A website deleted while its batch was written: the deletion committed after
// the attempt's snapshot was taken (so its rows were not skipped) and before
// the foreign key's check. The next attempt's snapshot skips that website's
// rows; but another website of the batch may finish deleting during it, so
// each such failure earns one more attempt, up to one per website the batch
// names (each failure is a website gone for good, so there can be no more).
const WEBSITE_GONE = '23503';

/** How many websites `rows` name: the most attempts a batch can lose to websites deleted meanwhile. Counted only once one has. */
function websitesNamed(rows: EventRow[]): number {
  return new Set(rows.map((row) => row.websiteId)).size;
}

/**
 * An error that belongs to one row's data (a data exception, a check or
 * not-null violation, a value too big for an index), not to the database
 * being unavailable: the batch's other rows can still be stored.
 */
function isRowDataError(error: unknown): boolean {
  const code = errorCode(error);
  return typeof code === 'string' && (code.startsWith('22') || code === '23514' || code === '23502' || code === '54000');
}

export default fp<{ config: Config }>(
  async function analyticsBatcherPlugin(app: FastifyInstance, { config }) {
    // Counted, not kept: with a Set of the requests themselves, each request's
    // objects outlived the next scavenge and most were promoted (under load,
    // 1.1 MiB kept and 0.9 MiB promoted a scavenge, 3.8–5.4 ms each, against
    // 0.25 MiB, 9 KiB and 1.7 ms with a count; `npm run bench:profile -- --heap`,
    // docs/performance.md). The count falls when the response closes, which it
    // does once whether it was sent or the client hung up: a client gone after
    // its body arrived gets neither onResponse nor onRequestAbort, and its
    // request stayed counted until the close gave up waiting.
    let requestsInFlight = 0;
    const release = () => {
      requestsInFlight -= 1;
    };

    /**
     * One INSERT of `rows`, tried again when an attempt fails in a way the next
     * can get past: once after a deadlock or serialization failure, and once
     * for each website deleted while the batch was written.
     */
    async function insert(rows: EventRow[]): Promise<RecordOutcome[]> {
      let conflictRetried = false;
      let websitesGone = 0;
      for (;;) {
        try {
          // Bounded like every elevated query on a request's path: its callers
          // wait for it (under the fault test a write once waited out a closed
          // connection's reconnect delay; docs/performance.md). A cancelled write
          // rolls back; a late commit stores events that were answered 503,
          // never the reverse.
          const stored = storedIds(await app.db.bounded(insertEventBatchQueryElevated(app.db.sql, rows)));
          return rows.map((row) => (stored.has(row.id) ? 'stored' : 'unknown-website'));
        } catch (error) {
          const code = errorCode(error);
          if (code === WEBSITE_GONE) {
            websitesGone += 1;
            if (websitesGone <= websitesNamed(rows)) continue;
          }
          if (!conflictRetried && typeof code === 'string' && CONFLICT.has(code)) {
            conflictRetried = true;
            continue;
          }
          throw error;
        }
      }
    }

    /**
     * A row's refusal, logged by its own request (ingest-service.ts), whose
     * line then carries the request id: a batch's line has none of its own.
     */
    function refusedFor(error: unknown): RecordOutcome {
      // The error's detail would carry the whole row; its code and constraint say what to fix.
      const { code, constraint_name: constraint, column_name: column } = error as { code?: string; constraint_name?: string; column_name?: string };
      return { refused: { code, constraint, column } };
    }

    /**
     * A batch one row refused: each row again in a statement of its own, so the
     * others are stored. Stops at the first failure that is not a row's own;
     * the rows after it get 503 without being tried.
     */
    async function insertOneByOne(rows: EventRow[]): Promise<RowOutcome[]> {
      const outcomes: RowOutcome[] = [];
      for (const row of rows) {
        try {
          outcomes.push(...(await insert([row])));
        } catch (error) {
          if (!isRowDataError(error)) {
            app.log.error({ err: error, events: rows.length - outcomes.length }, 'analytics batch failed; its requests get 503');
            const notWritten = new NotWritten(error);
            return [...outcomes, ...rows.slice(outcomes.length).map((): RowOutcome => notWritten)];
          }
          outcomes.push(refusedFor(error));
        }
      }
      return outcomes;
    }

    async function write(rows: EventRow[]): Promise<RowOutcome[]> {
      try {
        return await insert(rows);
      } catch (error) {
        if (!isRowDataError(error)) {
          app.log.error({ err: error, events: rows.length }, 'analytics batch failed; its requests get 503');
          throw error;
        }
        if (rows.length > 1) return insertOneByOne(rows);
        return [refusedFor(error)];
      }
    }

    const batches = createGroupCommit<EventRow, RowOutcome>({
      maxRows: config.ANALYTICS_BATCH_MAX_ROWS,
      maxWaitMs: config.ANALYTICS_BATCH_MAX_WAIT_MS,
      maxInFlight: config.ANALYTICS_BATCH_MAX_IN_FLIGHT,
      queueMax: config.ANALYTICS_QUEUE_MAX,
      maxQueueWaitMs: config.ANALYTICS_QUEUE_MAX_WAIT_MS,
      // Requests answered but not yet closed count too, so a batch may wait
      // a little longer than it needs to, never start sooner.
      itemsInHand: () => requestsInFlight,
      write,
    });

    // The queue's depth and its refusals go to /metrics (plugins/metrics.ts), where the app has them.
    const metrics = app.hasDecorator('metrics') ? app.metrics.dependencies : undefined;
    metrics?.watchIngestQueue(() => batches.stats().queued);

    app.decorate('analyticsBatcher', {
      async record(row: EventRow) {
        let outcome: RowOutcome;
        try {
          outcome = await batches.add(row);
        } catch (error) {
          // Backpressure: overload turned away before its event was tried, as a refusal (warn, no
          // stack, stored only as a count a minute), not a failure. A flood of them filled the log
          // queue and pushed out the batch failures that say why (`analytics batch failed`).
          if (error instanceof QueueFullError) {
            metrics?.ingestRefused('queue_full');
            throw new BusyError('Too many analytics events waiting; try again shortly', 'ingest queue full (ANALYTICS_QUEUE_MAX)');
          }
          if (error instanceof QueueTimeoutError) {
            metrics?.ingestRefused('queue_wait');
            throw new BusyError('Analytics events are being written slowly; try again shortly', 'no batch took the event within ANALYTICS_QUEUE_MAX_WAIT_MS');
          }
          if (error instanceof ClosedError) throw new ShuttingDownError('Service is shutting down');
          // The batch's failure: each request's `request failed` line says why (the batch's own
          // line has no request ids), its client only that the event was not stored.
          throw withCause(serviceUnavailable('Analytics event could not be stored'), error);
        }
        if (outcome instanceof NotWritten) throw withCause(serviceUnavailable('Analytics event could not be stored'), outcome.cause);
        return outcome;
      },
      admit(reply: FastifyReply) {
        requestsInFlight += 1;
        reply.raw.once('close', release);
      },
    });

    // The server waits for requests in flight before any onClose hook runs, and
    // an ingestion request waits for its batch: a batch that cannot commit
    // (a held lock) would hold the whole close until the process is killed.
    // So the drain's share of the deadline (lib/shutdown-budget.ts) starts at
    // preClose; when it is spent, every caller still waiting gets 503, and the
    // logs and the pool get the rest.
    let drainDeadline = Infinity;
    let abandonTimer: NodeJS.Timeout | undefined;
    app.addHook('preClose', async () => {
      const { drainMs } = shutdownBudget(config.SHUTDOWN_TIMEOUT_MS);
      drainDeadline = Date.now() + drainMs;
      abandonTimer = setTimeout(() => batches.abandon(new ClosedError('shutdown deadline reached before the batch committed')), drainMs);
      abandonTimer.unref();
    });
    app.addHook('onClose', async () => {
      const timeoutMs = Number.isFinite(drainDeadline) ? Math.max(0, drainDeadline - Date.now()) : shutdownBudget(config.SHUTDOWN_TIMEOUT_MS).drainMs;
      await batches.drain({ settled: () => requestsInFlight === 0, timeoutMs });
      clearTimeout(abandonTimer);
    });
  },
  { name: 'analytics-batcher', dependencies: ['db'] },
);
