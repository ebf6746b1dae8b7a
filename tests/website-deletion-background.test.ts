import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scheduleSweeps } from '../src/modules/websites/deletion/worker.ts';
import { createWebsitesService } from '../src/modules/websites/service.ts';
import { ANALYTICS_TABLES, adminToken, createWebsite, insertEventsInBulk } from './support/analytics.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { untilWaitingOnLock } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// DELETE /api/websites/:id waits for the deletion's batches at most
// WEBSITE_DELETE_WAIT_MS, then answers 202 while they go on as a task of the
// process (src/modules/websites/deletion/running.ts). A database of this file's
// own: the sweeps here finish every marked website they find, which in the
// shared database would include other files' on purpose.

const database = usePrivateDatabase('website_deletion', { max: 4 });

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function until<T>(probe: () => Promise<T>, done: (value: T) => boolean, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value) || Date.now() > deadline) return value;
    await sleep(20);
  }
}

const rowsLeft = async (websiteId: string) => {
  const { sql } = database;
  const left: Record<string, number> = {};
  for (const table of ['websites', ...ANALYTICS_TABLES]) {
    const [row] = await sql`select count(*)::int as n from ${sql(`public.${table}`)} where ${sql(table === 'websites' ? 'id' : 'website_id')} = ${websiteId}`;
    if (row.n > 0) left[table] = row.n;
  }
  return left;
};

const insertManyEvents = (websiteId: string, count: number) => insertEventsInBulk(database.sql, websiteId, count);

const isMarked = async (websiteId: string) =>
  (await database.sql`select 1 from public.websites where id = ${websiteId} and deletion_started_at is not null`).length === 1;

/** The log lines, parsed, that name `websiteId`. */
const linesAbout = (lines: string[], websiteId: string) =>
  lines.map((line) => JSON.parse(line) as { level: number; msg: string; websiteId?: string; err?: { message: string } }).filter((line) => line.websiteId === websiteId);

/** Holds every event of the website (FOR UPDATE) until `release` is called, or `maxMs` has passed. */
async function holdEvents(websiteId: string, maxMs: number) {
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
    setTimeout(resolve, maxMs).unref();
  });
  let locked!: () => void;
  const lockTaken = new Promise<void>((resolve) => (locked = resolve));
  const holder = database.sql.begin(async (tx) => {
    await tx`select 1 from public.analytics_events where website_id = ${websiteId} for update`;
    locked();
    await released;
  });
  await lockTaken;
  return {
    release: async () => {
      release();
      await holder;
    },
  };
}

describe('a website deletion that outlasts the wait', () => {
  let app: FastifyInstance;
  let lines: string[];
  let auth: { authorization: string };
  beforeAll(async () => {
    ({ app, lines } = await buildTestAppWithLog({ DATABASE_URL: database.url, WEBSITE_DELETE_BATCH: '100', WEBSITE_DELETE_WAIT_MS: '50' }));
    auth = { authorization: `Bearer ${await adminToken()}` };
  });
  afterAll(async () => app?.close());

  it('answers 202; the website is gone from every read at once, its rows go in the background, its feedback stays unlinked; a second DELETE joins the one deleter', { timeout: 120_000 }, async () => {
    const { sql } = database;
    const site = await createWebsite(app, 'Large');
    await insertManyEvents(site.id, 20_000);
    const feedback = await sql<{ id: string }[]>`
      insert into public.feedback (name, email, comment, rating, website_id)
      select 'Ann', 'ann@example.test', 'About the large site ' || g, 4, ${site.id} from generate_series(1, 3) g
      returning id`;

    const response = await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
    expect(response.statusCode, response.body).toBe(202);
    expect(response.json()).toEqual({ success: true, message: 'Website deletion under way', data: { id: site.id } });
    // Answered while its rows are still there: the batches were not waited for.
    expect((await rowsLeft(site.id)).analytics_events).toBeGreaterThan(0);
    expect((await app.inject({ method: 'GET', url: `/api/websites/${site.id}`, headers: auth })).statusCode).toBe(404);
    const listed = await app.inject({ method: 'GET', url: '/api/websites?limit=100', headers: auth });
    expect(listed.json().data.map((website: { id: string }) => website.id)).not.toContain(site.id);
    expect((await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` })).statusCode).toBe(404);

    // Asked again while it runs: the same answer, and it joins the deletion running instead of starting another.
    const again = await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
    expect(again.statusCode, again.body).toBe(202);
    expect(again.json()).toEqual({ success: true, message: 'Website deletion under way', data: { id: site.id } });
    // Two deleters would take turns on the website's advisory lock: one running a batch, the other waiting for it.
    let mostDeletersAtOnce = 0;
    const left = await until(
      async () => {
        const [{ deleters }] = await sql<{ deleters: number }[]>`
          select count(*)::int as deleters from pg_stat_activity
           where datname = current_database() and pid <> pg_backend_pid() and state = 'active' and strpos(query, 'delete_website_batch') > 0`;
        mostDeletersAtOnce = Math.max(mostDeletersAtOnce, deleters);
        return rowsLeft(site.id);
      },
      (rows) => Object.keys(rows).length === 0,
    );
    expect(left).toEqual({});
    expect(mostDeletersAtOnce).toBeLessThanOrEqual(1);
    // One deleter, so one line: each deletion that no request waited out says when it finished.
    const finished = await until(
      async () => linesAbout(lines, site.id).filter((line) => line.msg === 'website deletion finished in the background'),
      (found) => found.length > 0,
      5_000,
    );
    expect(finished).toHaveLength(1);
    expect(finished[0].level).toBe(30);

    const unlinked = await sql`select website_id from public.feedback where id in ${sql(feedback.map((row) => row.id))}`;
    expect(unlinked).toEqual([{ website_id: null }, { website_id: null }, { website_id: null }]);
    expect((await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth })).statusCode).toBe(404);
  });

  it('a failure after the answer is logged with the website id; the website stays marked, and a later sweep finishes it', { timeout: 60_000 }, async () => {
    const { app: strict, lines: strictLines } = await buildTestAppWithLog({
      DATABASE_URL: database.url,
      DATABASE_STATEMENT_TIMEOUT_MS: '200',
      WEBSITE_DELETE_BATCH: '100',
      WEBSITE_DELETE_WAIT_MS: '50',
    });
    const site = await createWebsite(strict, 'Held after the answer');
    try {
      await insertManyEvents(site.id, 500);
      // Every event held for longer than the batches' four tries (200 ms each, and 25–100 ms between).
      const held = await holdEvents(site.id, 20_000);
      let sweeps: ReturnType<typeof scheduleSweeps> | undefined;
      try {
        const response = await strict.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
        expect(response.statusCode, response.body).toBe(202);
        const failed = await until(
          async () => linesAbout(strictLines, site.id).filter((line) => line.level === 50),
          (found) => found.length > 0,
          10_000,
        );
        expect(failed).toHaveLength(1);
        expect(failed[0].msg).toBe('website deletion failed; it stays marked, and the next sweep or DELETE finishes it');
        expect(failed[0].err?.message).toMatch(/statement timeout|no database answer/);
        expect(await isMarked(site.id)).toBe(true);
        expect((await rowsLeft(site.id)).analytics_events).toBe(500);
        expect((await strict.inject({ method: 'GET', url: `/api/websites/${site.id}`, headers: auth })).statusCode).toBe(404);

        // The sweep runs again and again, as the server's does every five minutes: the one while the rows
        // are still held fails, a later one finishes the deletion.
        const websites = createWebsitesService({ db: strict.db, deleteBatchSize: 100, log: strict.log });
        const outcomes: string[] = [];
        sweeps = scheduleSweeps(
          () =>
            websites.finishLeftDeletionsElevated().then(
              () => void outcomes.push('finished'),
              () => void outcomes.push('failed'),
            ),
          { firstAfterMs: 10, everyMs: 100 },
        );
        await until(async () => outcomes, (seen) => seen.includes('failed'), 10_000);
        expect(await isMarked(site.id)).toBe(true);
        await held.release();
        expect(await until(() => rowsLeft(site.id), (rows) => Object.keys(rows).length === 0, 20_000)).toEqual({});
        expect(outcomes[0]).toBe('failed');
      } finally {
        await sweeps?.stop();
        await held.release();
      }
    } finally {
      await strict.close();
      await database.sql`delete from public.websites where id = ${site.id}`;
    }
  });
});

describe('the wait itself', () => {
  it('with a long wait, the request answers 200 once every row is gone, as before', { timeout: 60_000 }, async () => {
    const { app } = await buildTestAppWithLog({ DATABASE_URL: database.url, WEBSITE_DELETE_BATCH: '100', WEBSITE_DELETE_WAIT_MS: '60000' });
    try {
      const site = await createWebsite(app, 'Waited for');
      await insertManyEvents(site.id, 2_000);
      const auth = { authorization: `Bearer ${await adminToken()}` };
      const response = await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json()).toEqual({ success: true, message: 'Website deleted' });
      expect(await rowsLeft(site.id)).toEqual({});
    } finally {
      await app.close();
    }
  });

  it('0: never waits; even a website of one event is 202, and then gone', async () => {
    const { app } = await buildTestAppWithLog({ DATABASE_URL: database.url, WEBSITE_DELETE_WAIT_MS: '0' });
    try {
      const site = await createWebsite(app, 'Not waited for');
      await insertManyEvents(site.id, 1);
      const auth = { authorization: `Bearer ${await adminToken()}` };
      const response = await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
      expect(response.statusCode, response.body).toBe(202);
      expect(await until(() => rowsLeft(site.id), (rows) => Object.keys(rows).length === 0, 10_000)).toEqual({});
    } finally {
      await app.close();
    }
  });
});

describe('a shutdown during a background deletion', () => {
  it('ends the wait of a request at once, closes within its budget while a batch is held, and leaves the website marked for the next start', { timeout: 60_000 }, async () => {
    // 2 s in all: the drain's share is 1.3 s, the pool's close 0.2 s (lib/shutdown-budget.ts). The
    // database's own deadlines are far longer, so a held batch would wait for its lock for 30 s.
    const { app, lines } = await buildTestAppWithLog({
      DATABASE_URL: database.url,
      SHUTDOWN_TIMEOUT_MS: '2000',
      DATABASE_STATEMENT_TIMEOUT_MS: '30000',
      DATABASE_ACQUIRE_TIMEOUT_MS: '30000',
      WEBSITE_DELETE_BATCH: '100',
      WEBSITE_DELETE_WAIT_MS: '60000',
    });
    let closed = false;
    const site = await createWebsite(app, 'Cut by the shutdown');
    try {
      await insertManyEvents(site.id, 2_000);
      const held = await holdEvents(site.id, 8_000);
      try {
        const auth = { authorization: `Bearer ${await adminToken()}` };
        const deleting = app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
        expect(await untilWaitingOnLock(database.sql, 'delete_website_batch')).toBe(true);
        const started = performance.now();
        const closing = app.close().then(() => performance.now() - started);
        // The request stops waiting when the shutdown begins, though its batch is still held.
        const response = await deleting;
        const answeredAfterMs = performance.now() - started;
        expect(response.statusCode, response.body).toBe(202);
        expect(answeredAfterMs).toBeLessThan(500);
        const closeMs = await closing;
        closed = true;
        expect(closeMs).toBeLessThan(2_000);
        expect(lines.some((line) => line.includes('website deletions still running at the end of their shutdown budget'))).toBe(true);
        // The pool's close ended its batch: said, with the website's id.
        const cut = await until(
          async () => linesAbout(lines, site.id).filter((line) => line.msg.startsWith('website deletion cut by the shutdown')),
          (found) => found.length > 0,
          2_000,
        );
        expect(cut.map((line) => line.level)).toEqual([40]);
      } finally {
        await held.release();
      }
      // The held batch may still delete its rows once the lock goes (its backend outlives the pool's
      // close); the website stays marked, and hidden, with most of its rows.
      await sleep(200);
      expect(await isMarked(site.id)).toBe(true);
      expect((await rowsLeft(site.id)).analytics_events).toBeGreaterThanOrEqual(1_900);
      // The next start's sweep finishes it.
      const { app: next } = await buildTestAppWithLog({ DATABASE_URL: database.url });
      try {
        await createWebsitesService({ db: next.db, deleteBatchSize: 500, log: next.log }).finishLeftDeletionsElevated();
      } finally {
        await next.close();
      }
      expect(await rowsLeft(site.id)).toEqual({});
    } finally {
      if (!closed) await app.close();
      await database.sql`delete from public.websites where id = ${site.id}`;
    }
  });
});
