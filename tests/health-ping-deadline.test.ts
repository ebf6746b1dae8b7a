import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import { connectDatabase, type Database } from '../src/plugins/db.ts';

// /health's database ping under a stalled event loop. A loop held 2–3 s by
// other work fires the ping's deadline before it reads the socket, where
// PostgreSQL's answer has waited all along: the ping failed and /health said
// 503 of a database that had answered. The deadline now reads pending I/O
// once more before it gives up.

const DEADLINE_MS = 200;

/** Holds the event loop, as a burst of CPU-bound requests does. */
function holdEventLoop(ms: number) {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // Busy: no timer fires and no socket is read meanwhile.
  }
}

let db: Database;
beforeAll(async () => {
  // One connection, opened here: the ping's query is written at once, with no connecting to wait for.
  db = connectDatabase(asLoginRole(inject('stack').databaseUrl), { max: 1 });
  await db.ping(5_000);
});
afterAll(async () => db?.close());

describe('the database ping deadline', () => {
  it('takes an answer that arrived while the event loop was held past the deadline', async () => {
    const ping = db.ping(DEADLINE_MS);
    ping.catch(() => {});
    // The driver sends the query from a setImmediate it queues a microtask or
    // two after the call; this one, queued after it, runs in the same turn as
    // soon as the query is out, and holds the loop three deadlines long while
    // the answer waits in the socket. (Queued before it, the query would go
    // out after the hold and the ping fail: the test cannot pass by accident.)
    for (let i = 0; i < 10; i += 1) await Promise.resolve();
    const held = new Promise<void>((resolve) =>
      setImmediate(() => {
        holdEventLoop(3 * DEADLINE_MS);
        resolve();
      }),
    );
    const latencyMs = await ping;
    await held;
    expect(latencyMs).toBeGreaterThan(3 * DEADLINE_MS);
  });

  it('still gives up on a database that does not answer, at about the deadline', async () => {
    // The pool's one connection is held by a transaction: the ping's query waits unsent.
    const busy = db.sql.begin((tx) => tx`select pg_sleep(1)`);
    const started = performance.now();
    await expect(db.ping(DEADLINE_MS)).rejects.toThrow(`database did not answer within ${DEADLINE_MS} ms`);
    expect(performance.now() - started).toBeLessThan(900);
    await busy;
    expect(await db.ping(5_000)).toBeGreaterThan(0);
  });
});
