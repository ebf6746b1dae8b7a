import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { feedbackBody } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// The database refusing the app's connections while it runs: CONNECT on the
// database revoked from PUBLIC (through which the login role has it) and the
// backends terminated, so every new connection is refused at its start with
// FATAL 42501 "permission denied for database". That is an outage, answered
// 503 and logged as a failure with its cause, as a database down is; not the
// 403 of a statement that row-level security or a privilege refused, which
// hid it from the 5xx alerts. In a database of this file's own: no other file
// loses its connections.

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';

describe('the database refusing connections while the app runs', () => {
  let database: Awaited<ReturnType<typeof createPrivateDatabase>>;
  let sql: postgres.Sql;
  let app: FastifyInstance;
  let lines: string[];

  beforeAll(async () => {
    database = await createPrivateDatabase('refusal');
    sql = postgres(database.url, { max: 1, onnotice: () => {} });
    ({ app, lines } = await buildTestAppWithLog({ DATABASE_URL: database.url }, 'info'));
  });
  afterAll(async () => {
    await app?.close();
    await sql?.end();
    await database?.drop();
  });

  const responsesWithStatus = async (status: string) => {
    const metric = await app.metrics.registry.getSingleMetric('http_responses_total')!.get();
    return metric.values.find((value) => value.labels.status_code === status)?.value ?? 0;
  };

  it('answers 503 Database unavailable (not 403), logs it as a failure with its cause, and counts it as a 5xx; an analytics batch\'s requests log its cause', async () => {
    const admin = await legacyAdmin();
    expect((await app.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: admin })).statusCode).toBe(200);

    const [{ name }] = await sql<{ name: string }[]>`select current_database() as name`;
    await sql.unsafe(`revoke connect on database "${name}" from public`);
    await sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${name} and usename = 'authenticator'`;
    // Until the pool sees its connections' ends, a query may still be sent on one (CONNECTION_CLOSED).
    const refusal = () => app.db.sql`select 1`.then(() => 'connected', (error: { code?: string }) => error.code);
    await expect.poll(refusal, { timeout: 10_000 }).toBe('42501');
    const forbiddenBefore = await responsesWithStatus('403');

    const asked = [
      ['legacy admin', { method: 'GET', url: '/api/feedback/get-feedback', headers: { ...admin, 'x-request-id': 'refusal-admin' } }],
      ['anonymous', { method: 'POST', url: '/api/feedback/submit-feedback', payload: feedbackBody(), headers: { 'x-request-id': 'refusal-anon' } }],
    ] as const;
    for (const [who, request] of asked) {
      const response = await app.inject(request);
      expect([who, response.statusCode, response.json()]).toEqual([
        who,
        503,
        { success: false, error: 'Database unavailable', statusCode: 503, requestId: request.headers['x-request-id'] },
      ]);
    }
    expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(503);

    const entries = lines.map((line) => JSON.parse(line));
    for (const requestId of ['refusal-admin', 'refusal-anon']) {
      const failed = entries.find((entry) => entry.requestId === requestId && entry.msg === 'request failed');
      expect(failed, requestId).toMatchObject({ level: 50, statusCode: 503, err: { code: '42501', message: expect.stringContaining('permission denied for database') } });
      expect(entries.filter((entry) => entry.requestId === requestId && entry.msg === 'request refused')).toEqual([]);
    }
    await expect.poll(() => responsesWithStatus('503')).toBeGreaterThanOrEqual(2);
    expect(await responsesWithStatus('403')).toBe(forbiddenBefore);

    // An analytics batch the database refuses: each of its requests' lines says why, which the
    // batch's own line (`analytics batch failed`, no request ids) alone did not tie to them.
    const events = ['refusal-event-1', 'refusal-event-2'];
    const answers = await Promise.all(
      events.map((requestId) =>
        app.inject({
          method: 'POST',
          url: '/api/analytics',
          headers: { 'x-request-id': requestId },
          payload: { websiteId: crypto.randomUUID(), eventType: 'page_view', page: '/home', userAgent: CHROME, sessionId: `session-${requestId}` },
        }),
      ),
    );
    for (const answer of answers) {
      expect([answer.statusCode, answer.json().error]).toEqual([503, 'Analytics event could not be stored']);
    }
    const logged = lines.map((line) => JSON.parse(line));
    expect(logged.some((entry) => entry.msg === 'analytics batch failed; its requests get 503')).toBe(true);
    for (const requestId of events) {
      const failed = logged.find((entry) => entry.requestId === requestId && entry.msg === 'request failed');
      expect(failed?.err?.message, requestId).toMatch(/^Analytics event could not be stored: permission denied for database /);
      expect(failed?.err?.stack, requestId).toContain('caused by: PostgresError: permission denied for database');
    }
  });
});
