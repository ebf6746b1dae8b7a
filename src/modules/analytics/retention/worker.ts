import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../../config.ts';
import type { ElevatedSql } from '../../../plugins/db.ts';
import { addDays, utcDay } from '../dates.ts';
import { deleteEventsBeforeElevated, deleteMembersBeforeElevated } from './queries.ts';

// Retention of raw analytics events (docs/analytics.md, "Retention"): events
// older than ANALYTICS_RETENTION_MONTHS are deleted in batches of
// ANALYTICS_RETENTION_BATCH rows, each its own short transaction, with a
// pause between them so autovacuum and ingestion keep up. Then the rollups'
// member rows (visitor and session ids by day) go too, a little later (see
// memberCutoffDay). The daily totals keep every day's figures, so summaries
// of old ranges do not change.

/** Midnight UTC, `months` calendar months before `now`: whole days go at once. */
export function retentionCutoff(now: Date, months: number): Date {
  const cutoff = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - months, 1));
  // The same day of the month, or the month's last day when it has fewer (31 March - 1 month → 28/29 February).
  const lastDay = new Date(Date.UTC(cutoff.getUTCFullYear(), cutoff.getUTCMonth() + 1, 0)).getUTCDate();
  cutoff.setUTCDate(Math.min(now.getUTCDate(), lastDay));
  return cutoff;
}

/**
 * The longest range the API accepts, in days with both ends included: a day
 * to the same day a year later, over a 29 February (dates.ts, isWithinAYear).
 */
export const LONGEST_RANGE_DAYS = 367;

/**
 * The first day whose member rows are kept. A member none of whose rows
 * remain is counted afresh when it comes back (its last day before is no
 * longer known): wrong only in a range holding both that day and the day it
 * came back. So however short the events' retention, member rows go only
 * before today − (longest + 1): the last deleted day is then at most
 * today − longest − 2, and a returning event's day at least today − 1 (a
 * batch written just after midnight holds yesterday's events), too far apart
 * for any range the API accepts. `today` and `eventsCutoffDay` are YYYY-MM-DD.
 */
export function memberCutoffDay(today: string, eventsCutoffDay: string, longestRangeDays = LONGEST_RANGE_DAYS): string {
  const outOfEveryRange = addDays(today, -(longestRangeDays + 1));
  return eventsCutoffDay < outOfEveryRange ? eventsCutoffDay : outOfEveryRange;
}

export interface PruneOptions {
  cutoff: Date;
  batchSize: number;
  /** Pause between batches. */
  pauseMs?: number;
  /** Checked between batches: stop early (the app is closing). */
  stopped?: () => boolean;
}

type BatchOptions = Omit<PruneOptions, 'cutoff'>;

/** Calls `deleteBatch` until a batch comes back short (or `stopped`); returns how many in all, and whether it finished. */
async function deleteInBatches(deleteBatch: () => Promise<number>, { batchSize, pauseMs = 0, stopped = () => false }: BatchOptions) {
  let total = 0;
  while (!stopped()) {
    const deleted = await deleteBatch();
    total += deleted;
    if (deleted < batchSize) return { total, finished: true };
    if (pauseMs > 0) await sleep(pauseMs);
  }
  return { total, finished: false };
}

/** Deletes every event before the cutoff, batch by batch; returns how many. */
export async function pruneExpiredEventsElevated(sql: ElevatedSql, { cutoff, ...options }: PruneOptions) {
  const { total } = await deleteInBatches(() => deleteEventsBeforeElevated(sql, cutoff, options.batchSize), options);
  return total;
}

/** Deletes every rollup member row of a day before `cutoffDay` (YYYY-MM-DD), batch by batch. */
export function pruneExpiredMembersElevated(sql: ElevatedSql, cutoffDay: string, options: BatchOptions) {
  return deleteInBatches(() => deleteMembersBeforeElevated(sql, cutoffDay, options.batchSize), options);
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
    // The member cut-off moves once a day, and a pass that finds nothing still
    // reads the three tables through: one finished pass a day is enough.
    let membersDoneBefore = '';
    const batches = { batchSize: config.ANALYTICS_RETENTION_BATCH, pauseMs: PAUSE_BETWEEN_BATCHES_MS, stopped: () => closing };
    const prune = async () => {
      const now = new Date();
      const cutoff = retentionCutoff(now, config.ANALYTICS_RETENTION_MONTHS);
      const deleted = await pruneExpiredEventsElevated(app.db.sql, { cutoff, ...batches });
      if (deleted > 0) app.log.info({ deleted, before: cutoff.toISOString() }, 'deleted analytics events past retention');

      const membersCutoff = memberCutoffDay(utcDay(now), utcDay(cutoff));
      if (closing || membersCutoff === membersDoneBefore) return;
      const members = await pruneExpiredMembersElevated(app.db.sql, membersCutoff, batches);
      if (members.finished) membersDoneBefore = membersCutoff;
      if (members.total > 0) app.log.info({ deleted: members.total, before: membersCutoff }, 'deleted analytics visitor and session days past retention');
    };
    const run = () => {
      running = prune().catch((error) => app.log.error({ err: error }, 'analytics retention run failed'));
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
