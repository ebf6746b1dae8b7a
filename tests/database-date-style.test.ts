import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp } from './support/app.ts';
import { feedbackBody, ISO_MS } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// A self-hosted database set to print dates in another style and zone
// (`ALTER DATABASE … SET datestyle = 'SQL, DMY'`, as an operator in Europe
// might). The driver reads timestamps' text with `new Date()`, which cannot
// read `29/11/2026 19:53:08.42 CET`: every feedback, website and log answer
// was a 500, and a website created or feedback triaged had committed first, so
// a retry made a second website. The app's connections ask for ISO and UTC at
// their start, whatever the database's defaults.

describe('a database whose dates are not ISO', () => {
  let database: Awaited<ReturnType<typeof createPrivateDatabase>>;
  let sql: postgres.Sql;
  let app: FastifyInstance;
  let admin: { authorization: string };

  beforeAll(async () => {
    database = await createPrivateDatabase('date_style');
    sql = postgres(database.url, { max: 1, onnotice: () => {} });
    const [{ name }] = await sql<{ name: string }[]>`select current_database() as name`;
    await sql.unsafe(`alter database "${name}" set datestyle = 'SQL, DMY'`);
    await sql.unsafe(`alter database "${name}" set timezone = 'Europe/Berlin'`);
    app = await buildTestApp({ DATABASE_URL: database.url });
    admin = await legacyAdmin();
  });
  afterAll(async () => {
    await app?.close();
    await sql?.end();
    await database?.drop();
  });

  it('the database prints dates so, to a connection that does not ask otherwise', async () => {
    const probe = postgres(database.url, { max: 1, onnotice: () => {} });
    try {
      const [row] = await probe<{ shown: string }[]>`select '2026-11-29 18:53:08.42+00'::timestamptz::text as shown`;
      expect(row.shown).toBe('29/11/2026 19:53:08.42 CET');
    } finally {
      await probe.end();
    }
  });

  it('answers websites, feedback and logs with ISO timestamps, one website per create', async () => {
    const created = await app.inject({ method: 'POST', url: '/api/websites', headers: admin, payload: { name: 'Date style', domain: 'dates.example.org' } });
    expect([created.statusCode, created.json().data?.createdAt]).toEqual([201, expect.stringMatching(ISO_MS)]);
    const [{ count }] = await sql<{ count: number }[]>`select count(*)::int as count from public.websites where name = 'Date style'`;
    expect(count).toBe(1);

    const submitted = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody() });
    expect(submitted.statusCode).toBe(201);
    const id = submitted.json().data.id as string;
    const triaged = await app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: admin, payload: { status: 'resolved' } });
    expect([triaged.statusCode, triaged.json().data?.resolvedAt]).toEqual([200, expect.stringMatching(ISO_MS)]);
    const item = await app.inject({ method: 'GET', url: `/api/feedback/${id}`, headers: admin });
    expect([item.statusCode, item.json().data?.createdAt, item.json().data?.resolvedAt]).toEqual([200, expect.stringMatching(ISO_MS), expect.stringMatching(ISO_MS)]);
    // Within a minute of now: read in the right zone, not an hour off.
    expect(Math.abs(Date.parse(item.json().data.createdAt) - Date.now())).toBeLessThan(60_000);
    const list = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: admin });
    expect(list.statusCode).toBe(200);

    const logged = await app.inject({ method: 'POST', url: '/api/admin/logs', headers: admin, payload: { level: 'info', message: 'date style' } });
    expect(logged.statusCode).toBe(201);
    const logs = await app.inject({ method: 'GET', url: '/api/admin/logs?source=client', headers: admin });
    expect([logs.statusCode, logs.json().data?.[0]?.createdAt]).toEqual([200, expect.stringMatching(ISO_MS)]);
  });
});
