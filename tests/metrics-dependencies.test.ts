import { once } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import { gunzipSync } from 'node:zlib';
import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createWebsite } from './support/analytics.ts';
import { buildTestApp, buildTestAppWithLog } from './support/app.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// /metrics as an on-call's alerts read it: the dependencies' series (the pool,
// the outbox, the auth server, rate limiting, ingestion), read through the
// real app's /metrics, and what the scrape itself costs.

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';
const METRICS_TOKEN = 'metrics-token-for-dependency-tests-0123456789';
const database = usePrivateDatabase('iobs_metrics', { max: 4 });

async function scrape(app: FastifyInstance, headers: Record<string, string> = {}) {
  const response = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}`, ...headers } });
  expect(response.statusCode).toBe(200);
  return response;
}

/** The value of one sample (`name{labels}` exactly as written, labels in prom-client's order), or undefined when absent. */
async function sample(app: FastifyInstance, series: string): Promise<number | undefined> {
  const text = (await scrape(app)).body;
  const line = text.split('\n').find((each) => each.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** Holds an exclusive lock on `table` (in the private database) until the returned function is called. */
async function lockTable(table: string): Promise<() => Promise<void>> {
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  let locked!: () => void;
  const isLocked = new Promise<void>((resolve) => (locked = resolve));
  const transaction = database.sql.begin(async (tx) => {
    await tx.unsafe(`lock table ${table} in access exclusive mode`);
    locked();
    await released;
  });
  await isLocked;
  return async () => {
    release();
    await transaction;
  };
}

describe('the database pool on /metrics', () => {
  it('shows requests holding and waiting for connections, and counts the ones refused at the acquire deadline', async () => {
    const app = await buildTestApp({
      DATABASE_URL: database.url,
      METRICS_TOKEN,
      DATABASE_POOL_MAX: '2',
      DATABASE_ACQUIRE_TIMEOUT_MS: '1500',
      DATABASE_STATEMENT_TIMEOUT_MS: '4000',
    });
    const admin = await legacyAdmin();
    try {
      expect(await sample(app, 'db_pool_connections_max')).toBe(2);
      expect(await sample(app, 'db_pool_requests_waiting')).toBe(0);
      const timeoutsBefore = (await sample(app, 'db_pool_acquire_timeouts_total')) ?? 0;
      const unlock = await lockTable('public.feedback');
      try {
        // Two reads take both connections and wait on the lock; two more wait for a connection.
        const reads = Array.from({ length: 4 }, () => app.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: admin }));
        await expect.poll(() => sample(app, 'db_pool_requests_waiting'), { timeout: 1_000, interval: 50 }).toBe(2);
        expect(await sample(app, 'db_pool_connections_in_use')).toBe(2);
        const statuses = (await Promise.all(reads)).map((response) => response.statusCode);
        expect(statuses).toEqual([503, 503, 503, 503]);
        // The two that never had a connection were refused at the acquire deadline; the others at the statement timeout.
        expect(await sample(app, 'db_pool_acquire_timeouts_total')).toBe(timeoutsBefore + 2);
      } finally {
        await unlock();
      }
      await expect.poll(() => sample(app, 'db_pool_connections_in_use'), { timeout: 2_000, interval: 50 }).toBe(0);
      expect(await sample(app, 'db_pool_requests_waiting')).toBe(0);
    } finally {
      await app.close();
    }
  });
});

describe('the feedback outbox on /metrics', () => {
  it('reads the notifications owed and the oldest one’s age at most every 5 s, and leaves them out when the table cannot be read', async () => {
    const app = await buildTestApp({ DATABASE_URL: database.url, METRICS_TOKEN });
    const owedFeedback = async (minutesAgo: number) => {
      const [row] = await database.sql<{ id: string }[]>`
        insert into public.feedback (name, email, rating, comment) values ('Metrics', 'metrics@example.test', 5, 'owed by the outbox') returning id`;
      await database.sql`update public.feedback_outbox set created_at = now() - make_interval(mins => ${minutesAgo}) where feedback_id = ${row.id}`;
    };
    try {
      await database.sql`delete from public.feedback_outbox`;
      expect(await sample(app, 'feedback_outbox_owed')).toBe(0);
      expect(await sample(app, 'feedback_outbox_oldest_owed_age_seconds')).toBe(0);

      // Read again only after 5 s: the scrapes meanwhile see the last read.
      await owedFeedback(10);
      await owedFeedback(1);
      // One sent and one given up are not owed.
      await owedFeedback(30);
      await owedFeedback(40);
      await database.sql`update public.feedback_outbox set sent_at = now() where created_at < now() - interval '25 minutes' and created_at > now() - interval '35 minutes'`;
      await database.sql`update public.feedback_outbox set gave_up_at = now() where created_at < now() - interval '35 minutes'`;
      expect(await sample(app, 'feedback_outbox_owed')).toBe(0);
      vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 5_001 });
      try {
        expect(await sample(app, 'feedback_outbox_owed')).toBe(2);
        // The oldest owed one is 10 minutes old (the clock here is 5 s ahead of the database's).
        const age = (await sample(app, 'feedback_outbox_oldest_owed_age_seconds'))!;
        expect(age).toBeGreaterThanOrEqual(600);
        expect(age).toBeLessThan(620);

        // The table locked: the scrape still answers, within the read's deadline, without the outbox's samples.
        const unlock = await lockTable('public.feedback_outbox');
        try {
          vi.setSystemTime(Date.now() + 5_001);
          const started = performance.now();
          const text = (await scrape(app)).body;
          expect(performance.now() - started).toBeLessThan(3_000);
          expect(text).toContain('# TYPE feedback_outbox_owed gauge');
          expect(text).not.toMatch(/^feedback_outbox_owed /m);
          expect(text).not.toMatch(/^feedback_outbox_oldest_owed_age_seconds /m);
          expect(text).toMatch(/^db_pool_connections_max 10$/m);
        } finally {
          await unlock();
        }
        vi.setSystemTime(Date.now() + 5_001);
        expect(await sample(app, 'feedback_outbox_owed')).toBe(2);
      } finally {
        vi.useRealTimers();
      }
    } finally {
      await app.close();
      await database.sql`delete from public.feedback`;
    }
  });
});

describe('the auth server on /metrics', () => {
  // A stand-in auth server whose next answer the test chooses.
  let answer: 'ok' | '4xx' | '5xx' | 'unreachable' | 'timeout' = 'ok';
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    request.resume();
    if (answer === 'timeout') return; // never answers; the app's deadline ends the call
    if (answer === 'unreachable') return request.socket.destroy();
    const [status, body] =
      answer === 'ok' ? [200, {}] : answer === '4xx' ? [400, { code: 'invalid_credentials', msg: 'Invalid login credentials' }] : [500, { msg: 'boom' }];
    response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
  });
  beforeAll(async () => {
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
  });
  afterAll(async () => {
    server.closeAllConnections();
    server.close();
  });

  it('counts every call by outcome, with its duration in a histogram', async () => {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const app = await buildTestApp({ METRICS_TOKEN, SUPABASE_URL: url, SUPABASE_ANON_KEY: 'anon-key-for-tests', AUTH_TIMEOUT_MS: '300' });
    try {
      for (const outcome of ['ok', '4xx', '5xx', 'unreachable', 'timeout', '4xx'] as const) {
        answer = outcome;
        const response = await app.inject({ method: 'POST', url: '/api/auth/signin', payload: { email: 'who@example.test', password: 'secret-password' } });
        expect(response.statusCode, outcome).toBeGreaterThanOrEqual(400);
      }
      const text = (await scrape(app)).body;
      const counts = Object.fromEntries([...text.matchAll(/^auth_server_requests_total\{outcome="([^"]+)"\} (\S+)$/gm)].map(([, outcome, value]) => [outcome, Number(value)]));
      expect(counts).toEqual({ ok: 1, '4xx': 2, '5xx': 1, unreachable: 1, timeout: 1 });
      expect(text).toMatch(/^auth_server_request_duration_seconds_count\{outcome="4xx"\} 2$/m);
      // The timeout waited out AUTH_TIMEOUT_MS (300 ms): above the 0.25 s bucket.
      expect(text).toMatch(/^auth_server_request_duration_seconds_bucket\{le="0.25",outcome="timeout"\} 0$/m);
      expect(text).toMatch(/^auth_server_request_duration_seconds_bucket\{le="\+Inf",outcome="timeout"\} 1$/m);
    } finally {
      await app.close();
    }
  });
});

describe('rate limiting on /metrics', () => {
  it('counts refusals by budget group', async () => {
    const app = await buildTestApp({ METRICS_TOKEN, RATE_LIMIT_GENERAL_PER_15MIN: '2', RATE_LIMIT_AUTH_PER_MIN: '1' });
    try {
      const remoteAddress = '198.51.100.31';
      for (let i = 0; i < 5; i += 1) await app.inject({ method: 'GET', url: '/no/such/page', remoteAddress });
      for (let i = 0; i < 2; i += 1) await app.inject({ method: 'POST', url: '/api/auth/signin', payload: {}, remoteAddress });
      expect(await sample(app, 'rate_limit_refusals_total{group="general"}')).toBe(3);
      expect(await sample(app, 'rate_limit_refusals_total{group="auth"}')).toBe(1);
      // Without REDIS_URL there is no store to fall back from: no sample rather than a reassuring 0.
      const text = (await scrape(app)).body;
      expect(text).toContain('# TYPE rate_limit_store_fallback gauge');
      expect(text).not.toMatch(/^rate_limit_store_fallback /m);
    } finally {
      await app.close();
    }
  });

  it('says 1 while Redis is unreachable and limits are counted in the process, 0 while Redis answers', async () => {
    const down = await buildTestApp({ METRICS_TOKEN, REDIS_URL: 'redis://127.0.0.1:6390', REDIS_COMMAND_TIMEOUT_MS: '200' });
    const up = await buildTestApp({ METRICS_TOKEN, REDIS_URL: 'redis://127.0.0.1:6379' });
    try {
      await down.inject({ method: 'GET', url: '/no/such/page' });
      await expect.poll(() => sample(down, 'rate_limit_store_fallback'), { timeout: 5_000, interval: 100 }).toBe(1);
      expect((await up.inject({ method: 'GET', url: '/no/such/page' })).statusCode).toBe(404);
      expect(await sample(up, 'rate_limit_store_fallback')).toBe(0);
    } finally {
      await Promise.all([down.close(), up.close()]);
    }
  });
});

describe('analytics ingestion under backpressure', () => {
  it('shows the queue and counts queue-full refusals, logged as refusals (warn, no stack) and stored only as a count', async () => {
    const { app, lines } = await buildTestAppWithLog({
      DATABASE_URL: database.url,
      METRICS_TOKEN,
      ANALYTICS_QUEUE_MAX: '5',
      ANALYTICS_BATCH_MAX_IN_FLIGHT: '1',
      ANALYTICS_BATCH_MAX_ROWS: '5',
      ANALYTICS_QUEUE_MAX_WAIT_MS: '60000',
      DATABASE_STATEMENT_TIMEOUT_MS: '20000',
      DATABASE_ACQUIRE_TIMEOUT_MS: '20000',
    });
    let closed = false;
    // buildTestAppWithLog's logger writes to `lines` only: what would be stored is read there.
    try {
      const site = await createWebsite(app, 'Backpressure');
      const event = (i: number) =>
        app.inject({
          method: 'POST',
          url: '/api/analytics',
          remoteAddress: '192.0.2.77',
          payload: { websiteId: site.id, eventType: 'page_view', page: `/p/${i}`, userAgent: CHROME, sessionId: `s-${randomUUID()}` },
        }).then((response) => response);
      const unlock = await lockTable('public.analytics_events');
      let answers: number[];
      try {
        // The first batch (5) is held by the lock, the next 5 wait in the queue, the rest are refused.
        const writing = Array.from({ length: 5 }, (_, i) => event(i));
        await new Promise((resolve) => setTimeout(resolve, 300));
        const rest = Array.from({ length: 15 }, (_, i) => event(5 + i));
        await expect.poll(() => sample(app, 'analytics_ingest_queue_events'), { timeout: 3_000, interval: 50 }).toBe(5);
        const refused = await Promise.all(rest.slice(5));
        expect(refused.map((response) => response.statusCode)).toEqual(Array(10).fill(503));
        expect(refused[0].json()).toMatchObject({ error: 'Too many analytics events waiting; try again shortly' });
        expect(refused[0].headers['retry-after']).toBeDefined();
        expect(await sample(app, 'analytics_ingest_refusals_total{reason="queue_full"}')).toBe(10);
        await unlock();
        answers = (await Promise.all([...writing, ...rest.slice(0, 5)])).map((response) => response.statusCode);
      } finally {
        await unlock();
      }
      expect(answers).toEqual(Array(10).fill(201));
      expect(await sample(app, 'analytics_ingest_queue_events')).toBe(0);

      const entries = lines.map((line) => JSON.parse(line));
      const queueFull = entries.filter((entry) => entry.error === 'Too many analytics events waiting; try again shortly');
      expect(queueFull).toHaveLength(10);
      for (const entry of queueFull) expect(entry).toMatchObject({ level: 40, msg: 'request refused', statusCode: 503, persist: false, reason: 'ingest queue full (ANALYTICS_QUEUE_MAX)' });
      expect(entries.filter((entry) => entry.msg === 'request failed')).toEqual([]);
      expect(lines.join('\n')).not.toContain('"stack"');
      await app.close();
      closed = true;
      // What app_logs stores of them (plugins/refusal-log.ts, written at the latest on close): one count for the minute.
      const counts = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'requests refused' && entry.statusCode === 503);
      expect(counts).toMatchObject([{ level: 40, route: 'POST /api/analytics', count: 10 }]);
      expect(counts[0].persist).toBeUndefined();
    } finally {
      if (!closed) await app.close();
    }
  });
});

describe('the request metrics themselves', () => {
  it('labels a method the app does not serve as `other`, whatever Node parsed', async () => {
    const app = await buildTestApp({ METRICS_TOKEN });
    try {
      for (const method of ['PROPFIND', 'MKCALENDAR', 'UNLOCK', 'M-SEARCH']) await app.inject({ method: method as 'GET', url: '/health' });
      await app.inject({ method: 'PURGE', url: '/no/such/page' });
      const text = (await scrape(app)).body;
      const methods = new Set([...text.matchAll(/method="([^"]+)"/g)].map(([, method]) => method));
      expect([...methods]).toEqual(['other']);
      // 405 for the four on /health, 404 for the last: all unmatched.
      expect(text).toMatch(/^http_requests_total\{method="other",route="\(unmatched\)",status_class="4xx"\} 5$/m);
    } finally {
      await app.close();
    }
  });

  it('is gzip-compressed for a scraper that accepts gzip, as it was for one that does not', async () => {
    const app = await buildTestApp({ METRICS_TOKEN });
    try {
      for (let i = 0; i < 20; i += 1) await app.inject({ method: 'GET', url: i % 2 ? '/health' : `/missing/${i}` });
      const plain = await scrape(app);
      expect(plain.headers['content-encoding']).toBeUndefined();
      expect(plain.headers.vary).toMatch(/accept-encoding/i);
      // Prometheus's own header.
      const zipped = await scrape(app, { 'accept-encoding': 'gzip' });
      expect(zipped.headers['content-encoding']).toBe('gzip');
      expect(zipped.headers['content-type']).toBe(plain.headers['content-type']);
      const text = gunzipSync(zipped.rawPayload).toString();
      expect(text).toContain('# TYPE http_requests_total counter');
      expect(zipped.rawPayload.length).toBeLessThan(text.length / 4);
      expect((await scrape(app, { 'accept-encoding': 'gzip;q=0, br' })).headers['content-encoding']).toBeUndefined();
      expect((await scrape(app, { 'accept-encoding': 'br;q=1, *;q=0.1' })).headers['content-encoding']).toBe('gzip');
    } finally {
      await app.close();
    }
  });

  it("counts requests Node's HTTP parser refused, by status and the parser's code, with no route", async () => {
    const { app, lines } = await buildTestAppWithLog({ METRICS_TOKEN });
    let closed = false;
    try {
      await app.listen({ host: '127.0.0.1', port: 0 });
      const { port } = app.server.address() as AddressInfo;
      const raw = async (request: string) => {
        const socket = connect(port, '127.0.0.1');
        let answer = '';
        socket.on('data', (chunk) => (answer += chunk));
        socket.on('error', () => {});
        socket.write(request);
        await once(socket, 'close');
        return answer.split(' ')[1];
      };
      expect(await raw('XQQ /health HTTP/1.1\r\nHost: x\r\n\r\n')).toBe('400');
      expect(await raw('XQQ /health HTTP/1.1\r\nHost: x\r\n\r\n')).toBe('400');
      expect(await raw(`GET /health HTTP/1.1\r\nHost: x\r\nCookie: ${'a'.repeat(20_000)}\r\n\r\n`)).toBe('431');
      const text = (await scrape(app)).body;
      expect(text).toMatch(/^http_client_errors_total\{status_code="400",code="HPE_INVALID_METHOD"\} 2$/m);
      expect(text).toMatch(/^http_client_errors_total\{status_code="431",code="HPE_HEADER_OVERFLOW"\} 1$/m);
      expect(text).not.toMatch(/route="[^"]*",status_class="4xx"/);
      // And in the stored per-minute refusal counts (plugins/refusal-log.ts), under a key of their own.
      await app.close();
      closed = true;
      const counts = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'requests refused');
      expect(counts).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ route: '(refused by the HTTP parser)', statusCode: 400, count: 2 }),
          expect.objectContaining({ route: '(refused by the HTTP parser)', statusCode: 431, count: 1 }),
        ]),
      );
    } finally {
      if (!closed) await app.close();
    }
  });
});
