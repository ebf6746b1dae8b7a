import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, Gauge } from 'prom-client';
import type { Config } from '../../config.ts';
import { counterOfTotal } from '../../lib/counter-of-total.ts';
import { errorCode, fromPostgresError } from '../../lib/errors.ts';
import { LogSink } from '../../lib/log-sink.ts';
import { shutdownBudget } from '../../lib/shutdown-budget.ts';
import { judgementOf } from '../../plugins/db-start.ts';
import { createLogsService } from './service.ts';

// Stores the server's own log entries at warn and above. The logger writes
// them into a LogSink (logger.ts, app.ts); this plugin drains it every
// `flushIntervalMs` in batches with one insert each, so no request waits on
// the database for its log lines. Entries older than LOG_RETENTION_DAYS are
// pruned on a timer, in batches (below). Client entries (POST /api/admin/logs, routes.ts) are
// written under the caller's rights instead.
//
// The first prune runs a minute after start, not an hour: an instance that is
// restarted more often than hourly (deploys, autoscaling) would otherwise
// never prune at all.
//
// Pruning deletes in batches, each its own short statement: one DELETE of
// everything expired outgrew the statement timeout (6M rows took 5 s), was
// cancelled and rolled back whole, so nothing was ever deleted again and the
// table grew for good. On close it stops between batches.
//
// Nothing is stored before the start has judged the database (its login and
// schema, plugins/db-start.ts): a login the database refused, or a database
// without the migrations, first showed as `storing log entries failed`, with
// a stack trace, ahead of the start's own line that says why.

/**
 * Entries deleted per statement. Measured on 2M–6M rows: a batch of 5 000
 * took 12–40 ms (slower as the deleted rows' index entries pile up ahead of
 * it until vacuum), so it stays far below the 5 s statement timeout even on a
 * cold cache or a loaded server, while a backlog of millions still goes in
 * about a minute (1 200 batches for 6M; 2M took 12 s).
 */
export const PRUNE_BATCH_SIZE = 5_000;

declare module 'fastify' {
  interface FastifyInstance {
    appLogs: {
      /** Stores whatever is queued now, once the start has judged the database; resolves when it is written (or dropped on failure). */
      flush(): Promise<void>;
      /** Deletes entries older than the retention; returns how many. */
      prune(): Promise<number>;
      stats(): { queued: number; dropped: number; failed: number };
    };
  }
}

export interface AppLogsOptions {
  config: Config;
  /** The sink the app's logger writes into; without one only client entries are stored. */
  sink?: LogSink;
  flushIntervalMs?: number;
  batchSize?: number;
  pruneIntervalMs?: number;
  /** Delay of the first prune after start; short, so uptime shorter than pruneIntervalMs still prunes. */
  firstPruneAfterMs?: number;
  /** Entries deleted per statement when pruning. */
  pruneBatchSize?: number;
}

/**
 * How a write the database failed reads in the log: its code and message, on
 * one line, for a database that cannot be reached, refuses the login or lacks
 * the table (a stack trace each second added lines and nothing else);
 * undefined for any other error, a fault here, which keeps its stack.
 */
function databaseFailure(error: unknown): { code: string; error: string } | undefined {
  const code = errorCode(error);
  if (typeof code !== 'string') return undefined;
  const fromTheServer = error instanceof Error && error.name === 'PostgresError';
  if (!fromTheServer && fromPostgresError(error)?.statusCode !== 503) return undefined;
  return { code, error: (error as Error).message || code };
}

export default fp<AppLogsOptions>(
  async function appLogsPlugin(
    app: FastifyInstance,
    {
      config,
      sink = new LogSink(),
      flushIntervalMs = 1_000,
      batchSize = 200,
      pruneIntervalMs = 60 * 60_000,
      firstPruneAfterMs = 60_000,
      pruneBatchSize = PRUNE_BATCH_SIZE,
    },
  ) {
    const logs = createLogsService({ db: app.db });
    const registers = [app.metrics.registry];
    let failed = 0;
    const failures = new Counter({ name: 'app_logs_write_failures_total', help: 'Log entries lost because storing them failed', registers });
    // A counter: rate() and promtool take a name ending in _total for one. The sink keeps the total.
    counterOfTotal('app_logs_dropped_total', 'Log entries dropped because the write queue was full', registers, () => sink.dropped);
    new Gauge({
      name: 'app_logs_queued',
      help: 'Log entries waiting to be stored',
      registers,
      collect() {
        this.set(sink.queued);
      },
    });

    /** The start's judgement of the database, once the app is ready (before, nothing is stored). */
    let judged: Promise<void> | undefined;
    let flushing: Promise<void> | undefined;
    async function drain() {
      if (judged === undefined || sink.queued === 0) return;
      await judged;
      while (sink.queued > 0) {
        const entries = sink.take(batchSize);
        if (entries.length === 0) continue;
        try {
          await logs.storeServerEntriesElevated(entries);
        } catch (error) {
          failed += entries.length;
          failures.inc(entries.length);
          // persist: false keeps this line out of the sink, or a database outage would feed itself.
          app.log.error({ ...(databaseFailure(error) ?? { err: error }), lost: entries.length, persist: false }, 'storing log entries failed');
          return;
        }
      }
    }
    const flush = () => (flushing ??= drain().finally(() => (flushing = undefined)));

    let closing = false;
    let pruning: Promise<number> | undefined;
    async function pruneBatches() {
      const deleted = await logs.pruneEntriesElevated(config.LOG_RETENTION_DAYS, { batchSize: pruneBatchSize, stopped: () => closing });
      if (deleted > 0) app.log.info({ deleted, retentionDays: config.LOG_RETENTION_DAYS }, 'pruned old log entries');
      return deleted;
    }
    // One run at a time: a timer that fires while a backlog is still going joins it.
    const prune = () => (pruning ??= pruneBatches().finally(() => (pruning = undefined)));

    let flusher: NodeJS.Timeout | undefined;
    // Runs after the db plugin's onReady, which judges the database: hooks run in the order they were added.
    app.addHook('onReady', function storeOnceJudged(done) {
      judged = judgementOf(app.db);
      flusher = setInterval(() => void flush(), flushIntervalMs).unref();
      done();
    });
    const pruneInBackground = () =>
      void prune().catch((error) => app.log.error({ ...(databaseFailure(error) ?? { err: error }), persist: false }, 'pruning log entries failed'));
    // Off the start-up path, and not holding the process open.
    const firstPrune = setTimeout(pruneInBackground, firstPruneAfterMs).unref();
    const pruner = setInterval(pruneInBackground, pruneIntervalMs).unref();

    app.decorate('appLogs', { flush, prune, stats: () => ({ queued: sink.queued, dropped: sink.dropped, failed }) });

    // Runs before the db plugin's own onClose closes the pool: plugins close in reverse order.
    app.addHook('onClose', async () => {
      closing = true;
      clearInterval(flusher);
      clearTimeout(firstPrune);
      clearInterval(pruner);
      // A prune still running ends after its current batch; its failure was reported where it started.
      const pruned = pruning?.catch(() => {});
      // Bounded: a stuck insert must not hold the close past the process's deadline.
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, shutdownBudget(config.SHUTDOWN_TIMEOUT_MS).flushMs)));
      await Promise.race([Promise.all([flush(), pruned]), late]);
      clearTimeout(timer);
    });
  },
  { name: 'app-logs', dependencies: ['db', 'metrics'] },
);
