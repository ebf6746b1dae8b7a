import net from 'node:net';
import postgres from 'postgres';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { reconnectDelaySeconds } from '../src/plugins/db.ts';

// How the patched driver's pool reopens a closed connection
// (patches/postgres+3.4.9.patch, `waiting` in index.js), checked against the
// real server. Before the patch, a query that found no free connection but a
// closed one became that connection's first query and waited out its whole
// reconnect delay (up to 20 s after a burst of errors), while another
// connection sat free; under the fault test's connection kills that was a
// request held until its deadline.

const databaseUrl = inject('stack').databaseUrl;
const { hostname, port } = new URL(databaseUrl);
const admin = postgres(databaseUrl, { max: 1, onnotice: () => {} });
const pools: postgres.Sql[] = [];

afterAll(() => admin.end());
afterEach(async () => {
  // A pool still waiting out a reconnect delay has nothing to finish: close at once.
  await Promise.all(pools.splice(0).map((sql) => sql.end({ timeout: 0 })));
});

const within = <T>(promise: Promise<T>, ms: number) =>
  Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))]);

describe('a pool whose connection closed', () => {
  it('serves a new query from the connection that frees first, not after the closed one’s reconnect delay', async () => {
    let closedConnection: () => void = () => {};
    const closed = new Promise<void>((resolve) => (closedConnection = resolve));
    const sql = postgres(databaseUrl, {
      max: 2,
      onnotice: () => {},
      // A long, fixed reconnect delay: whatever waits for the closed connection waits 30 s.
      backoff: () => 30,
      onclose: () => closedConnection(),
    });
    pools.push(sql);
    // Two statements at once open both connections.
    const [[first], [second]] = await Promise.all([
      sql`select pg_backend_pid() as pid, pg_sleep(0.2)`,
      sql`select pg_backend_pid() as pid, pg_sleep(0.2)`,
    ]);
    expect(first.pid).not.toBe(second.pid);

    await admin`select pg_terminate_backend(${first.pid})`;
    await within(closed, 5_000);
    // The open connection is busy for 300 ms, so the next query finds no free
    // connection, only the closed one.
    const busy = sql`select pg_backend_pid() as pid, pg_sleep(0.3)`;
    const next = sql`select pg_backend_pid() as pid`;
    const [[answer]] = await within(Promise.all([next, busy]), 5_000);
    expect(answer.pid).toBe(second.pid);
  });

  it('counts connection errors from the last successful connect: the delay starts small again after a reconnect', async () => {
    const retriesSeen: number[] = [];
    let socket: net.Socket | undefined;
    const sql = postgres(databaseUrl, {
      max: 1,
      onnotice: () => {},
      backoff: (retries: number) => (retriesSeen.push(retries), 0.01),
      // `socket` is in postgres.js's documented options but not in its types.
      socket: () =>
        new Promise<net.Socket>((resolve, reject) => {
          const opened = net.connect(Number(port), hostname);
          opened.once('connect', () => resolve((socket = opened)));
          opened.once('error', reject);
        }),
    } as postgres.Options<{}>);
    pools.push(sql);

    for (const round of [1, 2, 3]) {
      expect(await within(sql`select ${round}::int as round`, 5_000)).toEqual([{ round }]);
      // A socket error (not a clean close) counts as a connection error.
      const lost = new Promise((resolve) => socket!.once('close', resolve));
      socket!.destroy(new Error('injected socket error'));
      await lost;
    }
    expect(await within(sql`select 4 as round`, 5_000)).toEqual([{ round: 4 }]);
    // A connection reopened for the waiting queries (as one for a reservation)
    // did not reset the count: with the queue change alone this read 1, 2, 3.
    expect(retriesSeen).toEqual([1, 1, 1]);
  });
});

describe("the app's reconnect delay", () => {
  it('starts at 25–50 ms and never exceeds 2 s', () => {
    for (let i = 0; i < 200; i += 1) {
      const first = reconnectDelaySeconds(0);
      expect(first).toBeGreaterThanOrEqual(0.025);
      expect(first).toBeLessThanOrEqual(0.05);
      const late = reconnectDelaySeconds(40);
      expect(late).toBeGreaterThanOrEqual(1);
      expect(late).toBeLessThanOrEqual(2);
    }
  });
});
