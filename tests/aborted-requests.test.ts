import http from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { feedbackBody, waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// A request whose client gives up before the answer (curl -m 1 against a
// query held up by a lock) gets no onResponse from Fastify, which runs it only
// when the answer is sent: it left no `http` line and no count, though the
// server ran its query to the end. It is logged and counted as 499 (nginx's
// "client closed request") once, as the connection closes; and so is one whose
// connection the shutdown closed. The table is locked in a database of this
// file's own, so no other test file waits on it.

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type LogEntry = { level: number; msg: string; requestId?: string; [field: string]: unknown };

describe('requests whose connection closes before their answer', () => {
  let database: Awaited<ReturnType<typeof createPrivateDatabase>>;
  let sql: postgres.Sql;
  let admin: { authorization: string };

  beforeAll(async () => {
    database = await createPrivateDatabase('aborts');
    sql = postgres(database.url, { max: 3, onnotice: () => {} });
    admin = await legacyAdmin();
  });
  afterAll(async () => {
    await sql?.end();
    await database?.drop();
  });

  async function listeningApp() {
    const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: database.url }, 'http');
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    const entriesOf = (requestId: string) =>
      lines.map((line) => JSON.parse(line) as LogEntry).filter((entry) => entry.requestId === requestId);
    return { app, port, entriesOf };
  }

  /** Sends the request and closes its connection after `giveUpMs` without waiting for the answer (curl -m). */
  function askAndGiveUp(port: number, request: { method: string; path: string; headers: Record<string, string>; body?: string }, giveUpMs: number) {
    return new Promise<void>((resolve) => {
      const outgoing = http.request({ host: '127.0.0.1', port, method: request.method, path: request.path, headers: request.headers });
      outgoing.on('error', () => {});
      outgoing.on('close', () => resolve());
      outgoing.on('response', () => resolve());
      outgoing.end(request.body);
      setTimeout(() => {
        outgoing.destroy();
        resolve();
      }, giveUpMs);
    });
  }

  /** Holds an exclusive lock on public.feedback until the returned function is called. */
  async function lockFeedback(): Promise<() => Promise<void>> {
    let release!: () => void;
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    let locked!: () => void;
    const isLocked = new Promise<void>((resolve) => {
      locked = resolve;
    });
    const transaction = sql.begin(async (tx) => {
      await tx`lock table public.feedback in access exclusive mode`;
      locked();
      await released;
    });
    await isLocked;
    return async () => {
      release();
      await transaction;
    };
  }

  /** Until no query of the app's waits on a lock any more: the server has run the aborted request's query. */
  const noneWaiting = () =>
    waitFor(
      async () => (await sql`select 1 from pg_stat_activity where usename = 'authenticator' and wait_event_type = 'Lock'`).length === 0,
      10_000,
      'the app queries no longer waiting on the lock',
    );

  const countOf = async (app: FastifyInstance, metricName: string, labels: Record<string, string>) => {
    const metric = await app.metrics.registry.getSingleMetric(metricName)!.get();
    const matches = (value: { labels: Record<string, unknown> }) => Object.entries(labels).every(([key, label]) => value.labels[key] === label);
    return metric.values.find(matches)?.value ?? 0;
  };

  it('a request the client gave up on gets one `http` line and one 499 count; an answered request is as before', async () => {
    const { app, port, entriesOf } = await listeningApp();
    try {
      const answered = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: { ...admin, 'x-request-id': 'ops-answered-1' } });
      expect(answered.statusCode).toBe(200);
      // And over a real connection, whose response's close comes after its answer.
      const fetched = await fetch(`http://127.0.0.1:${port}/api/feedback/get-feedback`, { headers: { ...admin, 'x-request-id': 'ops-answered-2' } });
      expect(fetched.status).toBe(200);
      await fetched.arrayBuffer();

      const release = await lockFeedback();
      const asked: { id: string; method: string; path: string; route: string; headers: Record<string, string>; body?: string }[] = [
        { id: 'ops-abort-1', method: 'GET', path: '/api/feedback/get-feedback', route: '/api/feedback/get-feedback', headers: { ...admin } },
        {
          id: 'ops-abort-2',
          method: 'POST',
          path: '/api/feedback/submit-feedback',
          route: '/api/feedback/submit-feedback',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(feedbackBody()),
        },
      ];
      await Promise.all(asked.map(({ id, headers, ...request }) => askAndGiveUp(port, { ...request, headers: { ...headers, 'x-request-id': id } }, 1_000)));
      // The lock holds on past the clients' giving up; then the server runs their statements to the end.
      await sleep(500);
      await release();
      await noneWaiting();
      await sleep(300);

      for (const { id, method, route } of asked) {
        const httpLines = entriesOf(id).filter((entry) => entry.level === 25);
        expect(httpLines, id).toEqual([
          expect.objectContaining({ msg: 'request aborted by the client', method, route, statusCode: 499, responseTimeMs: expect.any(Number) }),
        ]);
        expect(httpLines[0].responseTimeMs as number, id).toBeGreaterThanOrEqual(900);
        expect(await countOf(app, 'http_requests_total', { method, route, status_class: '4xx' }), id).toBe(1);
      }
      expect(await countOf(app, 'http_responses_total', { status_code: '499' })).toBe(asked.length);

      // The answered requests: one line each, counted once as 200, no abort.
      for (const id of ['ops-answered-1', 'ops-answered-2']) {
        expect(entriesOf(id).filter((entry) => entry.level === 25), id).toEqual([expect.objectContaining({ msg: 'request completed', statusCode: 200 })]);
      }
      expect(await countOf(app, 'http_requests_total', { method: 'GET', route: '/api/feedback/get-feedback', status_class: '2xx' })).toBe(2);
    } finally {
      await app.close();
    }
  });

  it('a request whose connection the shutdown closed gets its `http` line and count too', async () => {
    const { app, port, entriesOf } = await listeningApp();
    const release = await lockFeedback();
    try {
      const cut = askAndGiveUp(port, { method: 'GET', path: '/api/feedback/get-feedback', headers: { ...admin, 'x-request-id': 'ops-cut-1' } }, 10_000);
      await waitFor(
        async () => (await sql`select 1 from pg_stat_activity where usename = 'authenticator' and wait_event_type = 'Lock'`).length > 0,
        10_000,
        'the request waiting on the lock',
      );
      // What server.ts does when the shutdown's budget for connections is spent.
      const closed = app.close();
      await sleep(100);
      app.server.closeAllConnections();
      await cut;
      await release();
      await closed;
      const entries = entriesOf('ops-cut-1');
      expect(entries.filter((entry) => entry.level === 25)).toEqual([
        expect.objectContaining({ msg: 'request aborted: its connection was closed by the shutdown', statusCode: 499 }),
      ]);
      expect(await countOf(app, 'http_responses_total', { status_code: '499' })).toBe(1);
    } finally {
      await release();
      await app.close();
    }
  });
  it("a request the server timed out (408, REQUEST_TIMEOUT_MS) is told of as the server's 408, not as its client giving up", async () => {
    const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: database.url, REQUEST_TIMEOUT_MS: '1000' }, 'http');
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    try {
      // Its body never arrives in full.
      const socket = connect(port, '127.0.0.1');
      let answer = '';
      socket.on('data', (chunk) => (answer += chunk)).on('error', () => {});
      const closed = new Promise((resolve) => socket.on('close', resolve));
      socket.write('POST /api/feedback/submit-feedback HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nx-request-id: slow-body-1\r\n\r\n{"a":');
      await Promise.race([closed, sleep(8_000)]);
      socket.destroy();
      expect(answer.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
      await sleep(200);
      const entries = lines.map((line) => JSON.parse(line) as LogEntry).filter((entry) => entry.requestId === 'slow-body-1' && entry.level === 25);
      expect(entries).toEqual([expect.objectContaining({ msg: 'request timed out before it arrived', statusCode: 408 })]);
      expect(await countOf(app, 'http_responses_total', { status_code: '408' })).toBe(1);
      expect(await countOf(app, 'http_responses_total', { status_code: '499' })).toBe(0);
    } finally {
      await app.close();
    }
  });

  it('an event stream its client closes (a dashboard tab) is told of as closed, not as an answer cut', async () => {
    const { app, port, entriesOf } = await listeningApp();
    try {
      await new Promise<void>((resolve) => {
        const request = http.request({ host: '127.0.0.1', port, path: '/admin/status/stream', headers: { ...admin, 'x-request-id': 'stream-1' } });
        request.on('response', (response) => response.once('data', () => void setTimeout(() => (request.destroy(), resolve()), 200)));
        request.on('error', () => resolve());
        request.end();
      });
      await waitFor(async () => entriesOf('stream-1').some((entry) => entry.level === 25), 5_000, 'the stream\'s http line');
      expect(entriesOf('stream-1').filter((entry) => entry.level === 25)).toEqual([
        expect.objectContaining({ msg: 'event stream closed by the client', statusCode: 200 }),
      ]);
    } finally {
      await app.close();
    }
  });
});
