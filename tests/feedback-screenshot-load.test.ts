import { createHash, randomBytes } from 'node:crypto';
import net, { type AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BUSY_MESSAGE } from '../src/modules/feedback/screenshot-slots.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { testSql } from './support/db.ts';
import { createWebsite, feedbackBody } from './support/feedback-fixtures.ts';

// A burst of maximum-size screenshot submissions, each from its own address
// and so within its own rate limit, must not take the pool: /health and a
// submission without a screenshot are still answered while the screenshots'
// inserts are stuck in the database. The inserts are held there by a lock on
// the website row they link to (their foreign key check waits for it), so
// the test counts what waits where instead of racing the clock. The pool is
// 4, smaller than the burst, as production's 10 is smaller than ten senders.

const sql = testSql();
const POOL = 4;
const BURST = 6;
const AT_ONCE = 2;
let app: FastifyInstance;
let lines: string[];

beforeAll(async () => {
  ({ app, lines } = await buildTestAppWithLog({
    DATABASE_POOL_MAX: String(POOL),
    // The held inserts must outlast the hold, not be cancelled at 5 s.
    DATABASE_STATEMENT_TIMEOUT_MS: '60000',
    FEEDBACK_SCREENSHOTS_AT_ONCE: String(AT_ONCE),
  }));
});

afterAll(async () => {
  await app?.close();
  await sql.end();
});

/** A 5 MiB PNG data URL of random bytes: incompressible, as a real screenshot is. */
function randomPngDataUrl(): string {
  const bytes = randomBytes(5 * 1024 * 1024);
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(bytes);
  return `data:image/png;base64,${bytes.toString('base64')}`;
}

const md5 = (text: string) => createHash('md5').update(text).digest('hex');
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('a burst of screenshot submissions', () => {
  it('leaves /health and small submissions answered while the screenshots wait in the database, and stores each one it accepts as sent', async () => {
    const websiteId = await createWebsite(sql, 'Screenshot burst');
    const screenshots = Array.from({ length: BURST }, randomPngDataUrl);

    const locker = await sql.reserve();
    let answered: Awaited<ReturnType<FastifyInstance['inject']>>[];
    try {
      await locker`begin`;
      await locker`select id from public.websites where id = ${websiteId} for update`;
      const [{ pid: lockerPid }] = await locker<{ pid: number }[]>`select pg_backend_pid() as pid`;
      const heldInserts = async () => {
        const [{ count }] = await sql<{ count: number }[]>`
          select count(*)::int as count from pg_stat_activity where ${lockerPid} = any(pg_blocking_pids(pid))`;
        return count;
      };

      const burst = screenshots.map((screenshot, i) =>
        app.inject({
          method: 'POST',
          url: '/api/feedback',
          remoteAddress: `192.0.2.${10 + i}`,
          payload: feedbackBody({ websiteId, screenshot }),
        }),
      );

      // The first screenshots are in the database, waiting for the lock.
      for (let waited = 0; (await heldInserts()) < AT_ONCE; waited += 50) {
        if (waited > 60_000) throw new Error('no screenshot insert reached the database');
        await sleep(50);
      }
      const started = performance.now();

      // While they wait: /health polled, a small submission sent, and the held inserts counted.
      const healthStatuses: number[] = [];
      let mostHeld = 0;
      let small: { statusCode: number } | undefined;
      const smallSubmission = app
        .inject({ method: 'POST', url: '/api/feedback', remoteAddress: '192.0.2.99', payload: feedbackBody() })
        .then((response) => (small = response));
      // At least 4 s: longer than /health's 2 s ping deadline once the pool is full, and than a slot's 3 s wait.
      while (performance.now() - started < 4_000 || (small === undefined && performance.now() - started < 10_000)) {
        const [health, held] = await Promise.all([app.inject({ method: 'GET', url: '/health' }), heldInserts()]);
        healthStatuses.push(health.statusCode);
        mostHeld = Math.max(mostHeld, held);
        await sleep(100);
      }

      // The small submission was answered before the lock let any screenshot through.
      expect(small?.statusCode).toBe(201);
      expect(healthStatuses.filter((status) => status !== 200)).toEqual([]);
      expect(mostHeld).toBeLessThanOrEqual(AT_ONCE);

      await locker`commit`;
      answered = await Promise.all(burst);
      await smallSubmission;
    } finally {
      locker.release();
    }

    // Each screenshot was stored exactly as sent, or refused in the envelope with Retry-After.
    const created = answered.filter((response) => response.statusCode === 201);
    expect(created.length).toBeGreaterThanOrEqual(1);
    for (const [i, response] of answered.entries()) {
      if (response.statusCode === 201) {
        const [row] = await sql<{ hash: string; length: number }[]>`
          select md5(screenshot) as hash, length(screenshot)::int as length from public.feedback where id = ${response.json().data.id}`;
        expect(row).toEqual({ hash: md5(screenshots[i]), length: screenshots[i].length });
      } else {
        expect(response.statusCode).toBe(503);
        expect(response.json()).toMatchObject({ success: false, error: BUSY_MESSAGE, statusCode: 503 });
        expect(response.headers['retry-after']).toBe('5');
      }
    }
    // A busy moment's refusals are warn lines of refused requests, not failures at error.
    const logged = lines.map((line) => JSON.parse(line));
    const busyLines = logged.filter((entry) => entry.error === BUSY_MESSAGE);
    expect(busyLines.length).toBe(answered.filter((response) => response.statusCode === 503).length);
    expect(busyLines.map((entry) => [entry.level, entry.msg])).toEqual(busyLines.map(() => [40, 'request refused']));
    expect(logged.filter((entry) => entry.msg === 'request failed')).toEqual([]);
  }, 120_000);

  it('keeps the slot of a client that hangs up after sending its body until its insert is done, then frees it', async () => {
    // Over real HTTP: a slot freed when the client went let a burst of
    // clients that hang up past the bound, each insert still running.
    if (!app.server.listening) await app.listen({ port: 0, host: '127.0.0.1' });
    const port = (app.server.address() as AddressInfo).port;
    const websiteId = await createWebsite(sql, 'Screenshot hang-ups');
    const locker = await sql.reserve();
    const sockets: net.Socket[] = [];
    let mostHeld = 0;
    try {
      await locker`begin`;
      await locker`select id from public.websites where id = ${websiteId} for update`;
      const [{ pid: lockerPid }] = await locker<{ pid: number }[]>`select pg_backend_pid() as pid`;
      const heldInserts = async () =>
        (await sql<{ count: number }[]>`select count(*)::int as count from pg_stat_activity where ${lockerPid} = any(pg_blocking_pids(pid))`)[0].count;
      for (let i = 0; i < AT_ONCE + 2; i += 1) {
        const body = JSON.stringify(feedbackBody({ websiteId, screenshot: randomPngDataUrl() }));
        const socket = net.connect(port, '127.0.0.1');
        socket.on('error', () => {});
        sockets.push(socket);
        socket.write(
          `POST /api/feedback HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: 198.51.100.${i}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n`,
        );
        socket.end(body);
        // Its insert reaches the database, or, past the bound, its body has long arrived and waits for a slot; then its client hangs up.
        for (let waited = 0; waited < 1_500 && (await heldInserts()) < i + 1; waited += 50) await sleep(50);
        socket.destroy();
        await sleep(200);
        mostHeld = Math.max(mostHeld, await heldInserts());
      }
      await sleep(500);
      mostHeld = Math.max(mostHeld, await heldInserts());
      expect(mostHeld).toBe(AT_ONCE);
    } finally {
      for (const socket of sockets) socket.destroy();
      await locker`rollback`;
      locker.release();
    }
    // The held inserts finish; their answers are sent to nobody, and their slots come back.
    const next = await app.inject({ method: 'POST', url: '/api/feedback', remoteAddress: '192.0.2.200', payload: feedbackBody({ websiteId, screenshot: randomPngDataUrl() }) });
    expect(next.statusCode).toBe(201);
  }, 120_000);
});
