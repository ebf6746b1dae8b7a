import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, describe, expect, inject, it } from 'vitest';
import { connectDatabase } from '../src/plugins/db.ts';
import { buildTestApp } from './support/app.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// A held lock must not stall the API: a statement that waits longer than
// DATABASE_STATEMENT_TIMEOUT_MS, and a request that waits longer than
// DATABASE_ACQUIRE_TIMEOUT_MS for a connection, get 503 in the envelope, and
// the same app serves normally once the lock is gone.

// A database of this file's own: the lock held here would stall every other
// file's work on the feedback table of a shared one.
const database = await createPrivateDatabase('timeouts');
const sql = postgres(database.url, { max: 4, onnotice: () => {} });
afterAll(async () => {
  await sql.end();
  await database.drop();
});

/** Holds ACCESS EXCLUSIVE on public.feedback until `release` is called. */
async function holdFeedbackLock() {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  const holder = sql.begin(async (tx) => {
    await tx`lock table public.feedback in access exclusive mode`;
    locked();
    await released;
  });
  await isLocked;
  // Let go after 6 s whatever happens, so a stalled request fails the test instead of hanging it.
  const failsafe = setTimeout(release, 6_000);
  return {
    release: async () => {
      clearTimeout(failsafe);
      release();
      await holder;
    },
  };
}

/** Backends of this database waiting on a lock (the parked requests). */
async function waitingOnLocks(): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select count(*)::int as n from pg_stat_activity
     where datname = current_database() and wait_event_type = 'Lock' and application_name = 'portfolio-backend'`;
  return row.n;
}

const expect503 = (response: { statusCode: number; json(): unknown }) => {
  expect(response.statusCode).toBe(503);
  expect(response.json()).toEqual({ success: false, error: expect.any(String), statusCode: 503, requestId: expect.any(String) });
};

/**
 * An app whose pool of two is taken: two admin lists wait on the held
 * feedback lock while `test` runs. `release` lets the lock go and gives the
 * lists' answers; the app is closed after, which stores its pending log lines.
 */
async function withPoolTaken(
  test: (pool: { app: FastifyInstance; headers: Record<string, string>; release(): Promise<{ statusCode: number }[]> }) => Promise<void>,
) {
  const app: FastifyInstance = await buildTestApp({
    DATABASE_URL: database.url,
    DATABASE_POOL_MAX: '2',
    DATABASE_ACQUIRE_TIMEOUT_MS: '400',
    DATABASE_STATEMENT_TIMEOUT_MS: '20000',
  });
  const headers = await legacyAdmin();
  const lock = await holdFeedbackLock();
  try {
    const parked = [1, 2].map(() => app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', headers }));
    await waitFor(async () => (await waitingOnLocks()) >= 2, 10_000, 'two parked requests');
    await test({
      app,
      headers,
      release: async () => {
        await lock.release();
        return Promise.all(parked);
      },
    });
  } finally {
    await lock.release().catch(() => {});
    await app.close();
  }
}

describe('database timeouts under a held lock', () => {
  it('a query stuck behind a lock ends with 503 after the statement timeout; the app recovers', async () => {
    const app: FastifyInstance = await buildTestApp({ DATABASE_URL: database.url, DATABASE_STATEMENT_TIMEOUT_MS: '500' });
    const headers = await legacyAdmin();
    const lock = await holdFeedbackLock();
    try {
      const started = performance.now();
      const stuck = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', headers });
      const elapsed = performance.now() - started;
      await lock.release();
      expect503(stuck);
      expect(elapsed).toBeLessThan(3_000);
      expect((await app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', headers })).statusCode).toBe(200);
    } finally {
      await lock.release().catch(() => {});
      await app.close();
    }
  });

  it('a database whose connection slots are all taken answers 503 with Retry-After, not 500; the app recovers', async () => {
    // The server's max_connections, a role's or a database's CONNECTION LIMIT: all SQLSTATE 53300.
    // A database's limit of 0 stands for them here without taking slots from anyone else's work.
    const [{ name }] = await sql<{ name: string }[]>`select current_database() as name`;
    const app: FastifyInstance = await buildTestApp({ DATABASE_URL: database.url });
    const headers = await legacyAdmin();
    try {
      await sql`alter database ${sql(name)} connection limit 0`;
      await sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name} and application_name = 'portfolio-backend'`;
      // The pool hears of the ends, so the request opens a connection rather than meeting a closed one.
      await waitFor(async () => (await sql`select from pg_stat_activity where datname = ${name} and application_name = 'portfolio-backend'`).length === 0, 5_000, 'the pool ended');
      await new Promise((resolve) => setTimeout(resolve, 200));
      const refused = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', headers });
      expect503(refused);
      expect(refused.json().error).toBe('Database busy; try again shortly');
      expect(refused.headers['retry-after']).toBe('5');
      await sql`alter database ${sql(name)} connection limit -1`;
      expect((await app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', headers })).statusCode).toBe(200);
    } finally {
      await sql`alter database ${sql(name)} connection limit -1`;
      await app.close();
    }
  });

  it('with every connection parked on the lock, a new request gets 503 after the acquire deadline; the app recovers', async () => {
    await withPoolTaken(async ({ app, headers, release }) => {
      const started = performance.now();
      const starved = await app.inject({ method: 'GET', url: '/api/websites', headers });
      const elapsed = performance.now() - started;
      const parked = await release();
      expect503(starved);
      expect(elapsed).toBeLessThan(3_000);
      for (const response of parked) expect(response.statusCode).toBe(200);
      expect((await app.inject({ method: 'GET', url: '/api/websites', headers })).statusCode).toBe(200);
    });
  });

  it("admin health, read while every connection is taken, answers within its probes' deadline: the database down, the e-mail backlog unknown", async () => {
    await withPoolTaken(async ({ app, headers, release }) => {
      const started = performance.now();
      const health = await app.inject({ method: 'GET', url: '/api/admin/health', headers });
      const elapsed = performance.now() - started;
      await release();
      // The database probe's own deadline is 2 s; the backlog's count waited for a connection as long as the lock lasted.
      expect(elapsed).toBeLessThan(4_000);
      expect([health.statusCode, health.json().data]).toMatchObject([503, { status: 'error', database: { status: 'down' }, email: { status: 'unknown', pendingOutbox: null } }]);
      expect(health.headers['retry-after']).toBe('5');
    });
  });
});

describe('a health check that misses its deadline', () => {
  it('is stored in app_logs once, however often it is asked for while the pool is taken', async () => {
    const failures = async () => (await sql<{ n: number }[]>`
      select count(*)::int as n from public.app_logs where message = 'health check: database unreachable'`)[0].n;
    const before = await failures();
    await withPoolTaken(async ({ app, release }) => {
      const checks = await Promise.all(Array.from({ length: 20 }, () => app.inject({ method: 'GET', url: '/health' })));
      expect(checks.map((check) => check.statusCode)).toEqual(Array(20).fill(503));
      await release();
    });
    expect((await failures()) - before).toBe(1);
  });

  it('is called off: the pings given up on do not run once the connection is free', async () => {
    // A database with no other connection, its commits counted from another database.
    const own = await createPrivateDatabase('ping');
    const stats = postgres(inject('stack').postgresUrl, { max: 1, onnotice: () => {} });
    const name = new URL(own.url).pathname.slice(1);
    const commits = async () => (await stats<{ n: number }[]>`
      select xact_commit::int as n from pg_stat_database where datname = ${name}`)[0].n;
    const backends = async () => (await stats<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity where datname = ${name}`)[0].n;
    // A backend reports its counts as it exits.
    const settled = async () => {
      await waitFor(async () => (await backends()) === 0, 10_000, 'no connection to the database');
      await new Promise((resolve) => setTimeout(resolve, 200));
      return commits();
    };
    const db = connectDatabase(own.url, { max: 1 });
    try {
      const before = await settled();
      // The pool's one connection is held for a second, as a request's transaction holds one;
      // thirty pings give up after 100 ms each.
      const busy = db.sql.begin((tx) => tx`select pg_sleep(1)`);
      const pings = await Promise.allSettled(Array.from({ length: 30 }, () => db.ping(100)));
      expect(pings.map((ping) => ping.status)).toEqual(Array(30).fill('rejected'));
      await busy;
      expect(await db.ping(2_000)).toBeGreaterThan(0);
      await db.close();
      // The transaction, the last ping and the connection's own start; the thirty abandoned pings would be thirty more.
      expect((await settled()) - before).toBeLessThan(10);
    } finally {
      await db.close().catch(() => {});
      await stats.end();
      await own.drop();
    }
  });
});
