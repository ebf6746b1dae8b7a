import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { adminToken } from './support/analytics.ts';
import { buildTestApp } from './support/app.ts';
import {
  acknowledgedId,
  type Answer,
  expectRunning,
  expectSuccessOrUnavailable,
  expectUnavailable,
  type RouteName,
  SUCCESS,
  type ServerProcess,
  send,
  startServerProcess,
  type Target,
} from './support/fault-traffic.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';
import { startSilentServer } from './support/silent-server.ts';

// Issue 7, faults: Postgres connections killed under requests, and Postgres
// unreachable. Every answer is the route's success or 503 in the SPEC
// envelope (never 500, never a hang: each request has a deadline), and the
// same server serves again once Postgres is back. The kills hit the real
// server process (src/server.ts), since whether the process survives them is
// the point, and run in a database of this file's own, so no other test file
// loses a connection.

const ROUTES: RouteName[] = ['submit feedback', 'ingest event', 'list feedback', 'analytics summary'];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** The pool reopens a closed connection within 2 s (reconnectDelaySeconds in src/plugins/db.ts). */
const RECOVERY_MS = 5_000;
/**
 * No answer under the kills waits this long: a request waits for a connection
 * to reopen (at most 2 s), not for the acquire deadline (5 s). Before the
 * driver's queue fix a request pinned to one closed connection waited out its
 * whole reconnect delay, and 2 of 4 runs had a request answered at 4.5–5 s.
 */
const SLOWEST_UNDER_KILLS_MS = 3_000;

describe('Postgres connections killed while requests are in flight', () => {
  let database: Awaited<ReturnType<typeof createPrivateDatabase>>;
  let sql: postgres.Sql;
  let server: ServerProcess;
  let target: Target;

  beforeAll(async () => {
    database = await createPrivateDatabase('faults');
    sql = postgres(database.url, { max: 4, onnotice: () => {} });
  });
  afterAll(async () => {
    await sql?.end();
    await database?.drop();
  });

  // A fresh server process per test: whether it survives is part of what is tested.
  beforeEach(async () => {
    server = await startServerProcess(database.url);
    const adminAuthorization = `Bearer ${await adminToken()}`;
    const created = await fetch(`${server.baseUrl}/api/websites`, {
      method: 'POST',
      headers: { authorization: adminAuthorization, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'Fault target', domain: `${randomUUID().slice(0, 8)}.example.test` }),
    });
    expect(created.status).toBe(201);
    const { data } = (await created.json()) as { data: { id: string } };
    target = { baseUrl: server.baseUrl, websiteId: data.id, adminAuthorization };
  });
  afterEach(async () => server?.stop());

  /** pg_terminate_backend on every connection of the server's pool; how many it ended. */
  async function killServerConnections(): Promise<number> {
    const rows = await sql`
      select pg_terminate_backend(pid) as ended from pg_stat_activity
       where datname = current_database() and application_name = 'portfolio-backend'`;
    return rows.filter((row) => row.ended).length;
  }

  async function expectStored(answers: Answer[]): Promise<void> {
    const ids = (route: RouteName) => answers.filter((a) => a.route === route).map(acknowledgedId).filter((id) => id !== undefined);
    const feedback = ids('submit feedback');
    const events = ids('ingest event');
    const [stored] = await sql`
      select (select count(*)::int from public.feedback where id = any(${feedback}::uuid[])) as feedback,
             (select count(*)::int from public.analytics_events where id = any(${events}::uuid[])) as events`;
    expect(stored).toEqual({ feedback: feedback.length, events: events.length });
  }

  /**
   * Once the kills stop, the same server serves every route again: each is
   * retried until it succeeds (at most RECOVERY_MS), every answer meanwhile
   * being a success or 503. Returns how long recovery took.
   */
  async function expectRecovered(): Promise<number> {
    const started = performance.now();
    const answers = await Promise.all(
      ROUTES.map(async (route) => {
        const seen: Answer[] = [];
        for (;;) {
          const answer = await send(target, route);
          seen.push(answer);
          if (answer.status === SUCCESS[route] || performance.now() - started > RECOVERY_MS) return seen;
          await sleep(250);
        }
      }),
    );
    expectRunning(server);
    for (const seen of answers) for (const answer of seen) expectSuccessOrUnavailable(answer, server);
    const last = answers.map((seen) => seen.at(-1)!);
    expect(last.map((a) => [a.route, a.status]), `not recovered within ${RECOVERY_MS} ms`).toEqual(ROUTES.map((route) => [route, SUCCESS[route]]));
    await expectStored(last);
    return Math.round(performance.now() - started);
  }

  it('requests waiting in Postgres when their connections are killed get 503; the next ones succeed', { timeout: 60_000 }, async () => {
    let answers: Answer[] = [];
    let ended = 0;
    // Holding the tables' locks parks each request's statement inside Postgres, so it is in flight when killed.
    await sql.begin(async (tx) => {
      await tx`lock table public.feedback, public.analytics_events, public.analytics_daily_totals in access exclusive mode`;
      const inFlight = ROUTES.map((route) => send(target, route));
      await waitFor(
        async () => {
          const [row] = await sql`
            select count(*)::int as waiting from pg_stat_activity
             where datname = current_database() and application_name = 'portfolio-backend' and wait_event_type = 'Lock'`;
          return row.waiting >= ROUTES.length;
        },
        10_000,
        'each request to wait on a lock',
      );
      ended = await killServerConnections();
      answers = await Promise.all(inFlight);
    });
    expect(ended).toBeGreaterThanOrEqual(ROUTES.length);
    await sleep(100);
    expectRunning(server);
    for (const answer of answers) expectUnavailable(answer, server);
    console.info(`[faults] parked requests: ${answers.map((a) => `${a.route} ${a.status}`).join(', ')}; recovered in ${await expectRecovered()} ms`);
  });

  it('under steady traffic with the pool killed every 50 ms, answers are success or 503, and every acknowledged write is stored', { timeout: 60_000 }, async () => {
    const answers: Answer[] = [];
    let ended = 0;
    const until = Date.now() + 4_000;
    const client = async (first: number) => {
      for (let i = first; Date.now() < until && !server.ended(); i += 1) answers.push(await send(target, ROUTES[i % ROUTES.length]));
    };
    const killer = async () => {
      while (Date.now() < until && !server.ended()) {
        await sleep(50);
        ended += await killServerConnections();
      }
    };
    await Promise.all([...Array.from({ length: 6 }, (_, i) => client(i)), killer()]);

    const unavailable = answers.filter((a) => a.status === 503).length;
    console.info(
      `[faults] ${answers.length} requests: ${answers.filter((a) => a.status === SUCCESS[a.route]).length} succeeded, ${unavailable} got 503, ` +
        `${answers.filter((a) => a.status === 0).length} no answer; ${ended} connections killed; slowest ${Math.max(...answers.map((a) => a.ms))} ms`,
    );
    expectRunning(server);
    for (const answer of answers) expectSuccessOrUnavailable(answer, server);
    expect(ended).toBeGreaterThan(0);
    expect(unavailable).toBeGreaterThan(0);
    expect(answers.length - unavailable).toBeGreaterThan(0);
    expect(Math.max(...answers.map((a) => a.ms))).toBeLessThan(SLOWEST_UNDER_KILLS_MS);
    await expectStored(answers);
    console.info(`[faults] recovered in ${await expectRecovered()} ms`);
  });
});

describe('Postgres unreachable when a request starts', () => {
  // Accepts connections and never answers: a database host that has hung.
  let silent: Awaited<ReturnType<typeof startSilentServer>>;
  const apps: FastifyInstance[] = [];

  beforeAll(async () => {
    silent = await startSilentServer();
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await silent.close();
  });

  async function appAgainst(databaseUrl: string): Promise<Target> {
    const app = await buildTestApp({ DATABASE_URL: databaseUrl });
    apps.push(app);
    await app.listen({ port: 0, host: '127.0.0.1' });
    return {
      baseUrl: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`,
      websiteId: randomUUID(),
      adminAuthorization: `Bearer ${await adminToken()}`,
    };
  }

  it('connection refused (nothing listens on 127.0.0.1:1): 503 at once on every DB route and on /health', { timeout: 20_000 }, async () => {
    const target = await appAgainst('postgres://postgres@127.0.0.1:1/portfolio');
    const answers = await Promise.all(ROUTES.map((route) => send(target, route)));
    for (const answer of answers) {
      expectUnavailable(answer);
      expect(answer.ms, answer.route).toBeLessThan(2_000);
    }
    const health = await fetch(`${target.baseUrl}/health`, { signal: AbortSignal.timeout(5_000) });
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ success: false, status: 'error', statusCode: 503 });
  });

  it('a host that accepts and never answers: 503 after the connect timeout, not a hang', { timeout: 30_000 }, async () => {
    const target = await appAgainst(`postgres://postgres@127.0.0.1:${silent.port}/portfolio`);
    const answers = await Promise.all(ROUTES.map((route) => send(target, route)));
    for (const answer of answers) {
      expectUnavailable(answer);
      // db.ts sets connect_timeout to 5 s.
      expect(answer.ms, answer.route).toBeLessThan(8_000);
    }
  });
});
