import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../../config.ts';
import type { ElevatedSql } from '../../../plugins/db.ts';
import { deleteEventsBeforeElevated } from './queries.ts';

// Retention of raw analytics events (docs/analytics.md, "Retention"): events
// older than ANALYTICS_RETENTION_MONTHS are deleted in batches of
// ANALYTICS_RETENTION_BATCH rows, each its own short transaction, with a
// pause between them so autovacuum and ingestion keep up. The rollups keep
// every day's figures, so summaries of old ranges do not change.

/** Midnight UTC, `months` calendar months before `now`: whole days go at once. */
export function retentionCutoff(now: Date, months: number): Date {
  const cutoff = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - months, 1));
  // The same day of the month, or the month's last day when it has fewer (31 March - 1 month → 28/29 February).
  const lastDay = new Date(Date.UTC(cutoff.getUTCFullYear(), cutoff.getUTCMonth() + 1, 0)).getUTCDate();
  cutoff.setUTCDate(Math.min(now.getUTCDate(), lastDay));
  return cutoff;
}

export interface PruneOptions {
  cutoff: Date;
  batchSize: number;
  /** Pause between batches. */
  pauseMs?: number;
  /** Checked between batches: stop early (the app is closing). */
  stopped?: () => boolean;
}

/** Deletes every event before the cutoff, batch by batch; returns how many. */
export async function pruneExpiredEventsElevated(sql: ElevatedSql, { cutoff, batchSize, pauseMs = 0, stopped = () => false }: PruneOptions) {
  let total = 0;
  while (!stopped()) {
    const deleted = await deleteEventsBeforeElevated(sql, cutoff, batchSize);
    total += deleted;
    if (deleted < batchSize) break;
    if (pauseMs > 0) await sleep(pauseMs);
  }
  return total;
}

const RUN_EVERY_MS = 60 * 60_000;
const FIRST_RUN_AFTER_MS = 60_000;
const PAUSE_BETWEEN_BATCHES_MS = 50;

/** Runs the pruning hourly; not under NODE_ENV=test, where apps share one database and tests prune by hand. */
export default fp<{ config: Config }>(
  async function analyticsRetentionPlugin(app: FastifyInstance, { config }) {
    if (config.NODE_ENV === 'test') return;
    let closing = false;
    let running: Promise<unknown> | undefined;
    const run = () => {
      const cutoff = retentionCutoff(new Date(), config.ANALYTICS_RETENTION_MONTHS);
      running = pruneExpiredEventsElevated(app.db.sql, {
        cutoff,
        batchSize: config.ANALYTICS_RETENTION_BATCH,
        pauseMs: PAUSE_BETWEEN_BATCHES_MS,
        stopped: () => closing,
      })
        .then((deleted) => {
          if (deleted > 0) app.log.info({ deleted, before: cutoff.toISOString() }, 'deleted analytics events past retention');
        })
        .catch((error) => app.log.error({ err: error }, 'analytics retention run failed'));
    };
    const first = setTimeout(run, FIRST_RUN_AFTER_MS).unref();
    const timer = setInterval(run, RUN_EVERY_MS).unref();
    app.addHook('onClose', async () => {
      closing = true;
      clearTimeout(first);
      clearInterval(timer);
      await running;
    });
  },
  { name: 'analytics-retention', dependencies: ['db'] },
);
