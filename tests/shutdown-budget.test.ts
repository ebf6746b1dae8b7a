import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { shutdownBudget } from '../src/lib/shutdown-budget.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { startServerProcess } from './support/fault-traffic.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { usePrivateDatabase } from './support/private-database.ts';
import { storedListRefusals } from './support/db.ts';

// SIGTERM while an analytics batch cannot commit (its table is locked): the
// batcher gets part of SHUTDOWN_TIMEOUT_MS to drain, not all of it, so the
// stored logs are still flushed and the process exits by itself (0) before
// the deadline would kill it (exit 1, last log lines lost).

const SHUTDOWN_TIMEOUT_MS = 4_000;
const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';

const database = usePrivateDatabase('shutdown', { max: 3 });

describe('the shutdown budget', () => {
  it('its shares follow one another within the deadline', () => {
    for (const totalMs of [1, 100, 1_000, SHUTDOWN_TIMEOUT_MS, 10_000, 60_000]) {
      const { responsesMs, drainMs, connectionsMs, flushMs, closeMs } = shutdownBudget(totalMs);
      // Streamed replies are cut before the drain's end, with time left for it.
      expect(responsesMs, `${totalMs}`).toBeLessThanOrEqual(drainMs);
      if (drainMs >= 2) expect(responsesMs, `${totalMs}`).toBeLessThan(drainMs);
      // Connections are closed after the drain's end, and the steps after it still fit.
      expect(connectionsMs, `${totalMs}`).toBeGreaterThanOrEqual(drainMs);
      expect(connectionsMs + flushMs + closeMs, `${totalMs}`).toBeLessThanOrEqual(totalMs);
    }
  });

  it('a batch stuck on a lock does not eat the whole deadline: logs flushed, exit 0', async () => {
    const server = await startServerProcess(database.url, {
      SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
      // Long enough that only the shutdown budget can end the stuck batch.
      DATABASE_STATEMENT_TIMEOUT_MS: '60000',
    });
    const authorization = `Bearer ${await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops-shutdown')}`;
    const created = await fetch(`${server.baseUrl}/api/websites`, {
      method: 'POST',
      headers: { authorization, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Shutdown site', domain: `${randomUUID().slice(0, 8)}.example.test` }),
    });
    expect(created.status).toBe(201);
    const websiteId = ((await created.json()) as { data: { id: string } }).data.id;

    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => (locked = resolve));
    const holder = database.sql.begin(async (tx) => {
      await tx`lock table public.analytics_events in access exclusive mode`;
      locked();
      await released;
    });
    await isLocked;
    try {
      const ingest = fetch(`${server.baseUrl}/api/analytics`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ websiteId, eventType: 'page_view', page: '/bye', userAgent: CHROME, sessionId: randomUUID() }),
        signal: AbortSignal.timeout(15_000),
      }).then(
        (response) => response.status,
        () => 0,
      );
      await waitFor(
        async () => (await database.sql`select 1 from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`).length > 0,
        10_000,
        'the batch parked on the lock',
      );
      // A refused request just before the signal: its log entry is still waiting to be stored.
      const refused = await fetch(`${server.baseUrl}/api/feedback/get-feedback`);
      expect(refused.status).toBe(401);
      const { exitCode, tookMs: took } = await server.terminate();
      expect(exitCode, server.output()).toBe(0);
      expect(took).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
      expect(await ingest).toBe(503);
    } finally {
      release();
      await holder.catch(() => {});
      await server.stop();
    }
    // The refusal reached app_logs before the process ended.
    expect((await storedListRefusals(database.sql)).length).toBeGreaterThan(0);
  });
});
