import Fastify, { type FastifyInstance } from 'fastify';
import { beforeEach, describe, expect, it } from 'vitest';
import appLogsPlugin from '../src/modules/logs/worker.ts';
import dbPlugin from '../src/plugins/db.ts';
import metricsPlugin from '../src/plugins/metrics.ts';
import { testConfig } from './support/app.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// Retention of app_logs past what one statement can delete: the prune goes in
// batches, each its own statement under the statement timeout, and stops
// between batches when the app closes. A database of its own: the tests fill
// and empty the whole table.

// Measured here: one DELETE of this many rows took 350–380 ms, over three
// times the timeout below; a batch of PRUNE_BATCH took 5 ms (the first 20).
const EXPIRED = 500_000;
const STATEMENT_TIMEOUT_MS = 100;
const PRUNE_BATCH = 1_000;

const database = usePrivateDatabase('logretention');
beforeEach(async () => {
  await database.sql`truncate public.app_logs`;
});

/** The logs plugin on its own, over the private database, with the statement timeout given. */
async function startLogs(statementTimeoutMs: number): Promise<FastifyInstance> {
  const config = testConfig({ DATABASE_URL: database.url, DATABASE_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs) });
  const app = Fastify();
  await app.register(dbPlugin, { config });
  await app.register(metricsPlugin, { config });
  await app.register(appLogsPlugin, { config, pruneBatchSize: PRUNE_BATCH });
  await app.ready();
  return app;
}

/** `count` entries past the 30-day retention, oldest first, one millisecond apart. */
async function insertExpired(count: number) {
  await database.sql`
    insert into public.app_logs (level, message, source, created_at)
    select 'warn', 'expired', 'server', now() - interval '40 days' + g * interval '1 millisecond'
      from generate_series(1, ${count}) g`;
  await database.sql`analyze public.app_logs`;
}

describe('log retention in batches', () => {
  it('prunes every expired entry and no newer one when one DELETE of them all outruns the statement timeout', async () => {
    await insertExpired(EXPIRED);
    await database.sql`
      insert into public.app_logs (level, message, source, created_at) values
        ('warn', 'kept: 29 days old', 'server', now() - interval '29 days'),
        ('error', 'kept: new', 'server', now())`;

    // What the prune did before: one statement for everything, cancelled and rolled back whole.
    const oneStatement = database.sql
      .begin(async (tx) => {
        await tx`select set_config('statement_timeout', ${`${STATEMENT_TIMEOUT_MS}ms`}, true)`;
        await tx`delete from public.app_logs where created_at < now() - interval '30 days'`;
      })
      .catch((error) => error.code);
    expect(await oneStatement, 'the test needs a table one DELETE cannot empty within the timeout').toBe('57014');

    const app = await startLogs(STATEMENT_TIMEOUT_MS);
    try {
      expect(await app.appLogs.prune()).toBe(EXPIRED);
    } finally {
      await app.close();
    }
    const left = await database.sql`select message from public.app_logs order by created_at`;
    expect(left.map((row) => row.message)).toEqual(['kept: 29 days old', 'kept: new']);
  });

  it('stops between batches when the app closes, and the close waits for the batch running', async () => {
    const expired = 100_000;
    await insertExpired(expired);
    // A generous timeout: this test is about stopping, not about the timeout.
    const app = await startLogs(5_000);
    const pruned = app.appLogs.prune();
    await app.close();
    const deleted = await pruned;
    expect(deleted).toBeGreaterThan(0);
    expect(deleted).toBeLessThan(expired);
    expect(deleted % PRUNE_BATCH).toBe(0);
    const [{ left }] = await database.sql`select count(*)::int as left from public.app_logs`;
    expect(left).toBe(expired - deleted);
  });
});
