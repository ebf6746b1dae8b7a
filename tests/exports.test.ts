import { randomUUID } from 'node:crypto';
import net, { type AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { csvCell, csvLine, UTF8_BOM } from '../src/lib/csv.ts';
import { legacyAdmin, refusedTokens } from './support/admin-auth.ts';
import { buildTestApp } from './support/app.ts';
import { createWebsite, insertEvents, type TestWebsite } from './support/analytics.ts';
import { testSql } from './support/db.ts';
import { TEST_ADMIN_JWT_SECRET } from './support/secrets.ts';
import { startServer, untilHealthy } from './support/spawned-server.ts';
import { waitFor } from './support/feedback-fixtures.ts';

// CSV downloads for admins: feedback and a website's daily series, streamed
// from a database cursor, with the JSON routes' filters and errors.

const sql = testSql();
afterAll(() => sql.end());

/** Splits an export's CSV text into rows of cells (RFC 4180 quoting), after the byte order mark every export starts with. */
function parseCsv(exported: string): string[][] {
  expect(exported.startsWith(UTF8_BOM), 'the byte order mark').toBe(true);
  const text = exported.slice(UTF8_BOM.length);
  const rows: string[][] = [];
  let row: string[] = [];
  let cell = '';
  let quoted = false;
  for (let i = 0; i < text.length; i += 1) {
    const char = text[i];
    if (quoted) {
      if (char === '"' && text[i + 1] === '"') (cell += '"'), (i += 1);
      else if (char === '"') quoted = false;
      else cell += char;
    } else if (char === '"') quoted = true;
    else if (char === ',') row.push(cell), (cell = '');
    else if (char === '\r' && text[i + 1] === '\n') {
      row.push(cell);
      rows.push(row);
      (row = []), (cell = ''), (i += 1);
    } else cell += char;
  }
  return rows;
}

describe('csv cells', () => {
  it('quotes what needs it and defuses spreadsheet formulas', () => {
    expect(csvLine(['a', 1, null, undefined, 'b,c', 'say "hi"', 'two\nlines'])).toBe('a,1,,,"b,c","say ""hi""","two\nlines"\r\n');
    expect(csvCell('=HYPERLINK("x")')).toBe(`"'=HYPERLINK(""x"")"`);
    expect(csvCell('+1')).toBe("'+1");
    expect(csvCell(-1)).toBe('-1');
    // Spreadsheets in `;` locales split on it, and a formula would start the next cell.
    expect(csvCell('x;=1+1;y')).toBe('"x;=1+1;y"');
    expect(csvCell('a\tb')).toBe('"a\tb"');
    expect(csvCell(new Date('2026-03-01T00:00:00Z'))).toBe('2026-03-01T00:00:00.000Z');
  });
});

describe('exports', () => {
  let app: FastifyInstance;
  let admin: { authorization: string };
  let site: TestWebsite;

  beforeAll(async () => {
    app = await buildTestApp();
    admin = await legacyAdmin();
    site = await createWebsite(app, 'Export site');
    await insertEvents(sql, site.id, [
      { session: 's1', visitor: 'v1', device: 'desktop', page: '/', at: '2026-04-01T10:00:00Z' },
      { session: 's1', visitor: 'v1', device: 'desktop', page: '/a', at: '2026-04-01T10:01:00Z' },
      { session: 's2', visitor: 'v2', device: 'mobile', page: '/', at: '2026-04-03T09:00:00Z' },
    ]);
  });
  afterAll(async () => app?.close());

  it('the daily series as CSV: the same figures as the JSON route, zero days included', async () => {
    const query = `websiteId=${site.id}&startDate=2026-03-31&endDate=2026-04-03`;
    const response = await app.inject({ method: 'GET', url: `/api/analytics/date-range/export?${query}`, headers: admin });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('text/csv; charset=utf-8');
    expect(response.headers['content-disposition']).toBe(`attachment; filename="analytics-${site.id}-2026-03-31-2026-04-03.csv"`);
    // UTF-8 with a byte order mark, as every export (docs/analytics.md, "Exports").
    expect([...response.rawPayload.subarray(0, 3)]).toEqual([0xef, 0xbb, 0xbf]);
    expect(response.body).toBe(
      '\uFEFFdate,pageViews,uniqueVisitors,sessions\r\n2026-03-31,0,0,0\r\n2026-04-01,2,1,1\r\n2026-04-02,0,0,0\r\n2026-04-03,1,1,1\r\n',
    );
    const json = await app.inject({ method: 'GET', url: `/api/analytics/date-range?${query}`, headers: admin });
    const fromJson = json.json().data.days.map((day: Record<string, unknown>) => [day.date, day.pageViews, day.uniqueVisitors, day.sessions].join(','));
    expect(parseCsv(response.body).slice(1).map((row) => row.join(','))).toEqual(fromJson);
  });

  it('the daily series refuses like the JSON route: 401, 403 for a key, 400 and 404 in the envelope', async () => {
    for (const { authorization } of await refusedTokens()) {
      const refused = await app.inject({ method: 'GET', url: `/api/analytics/date-range/export?websiteId=${site.id}`, headers: authorization ? { authorization } : {} });
      expect(refused.statusCode).toBe(401);
    }
    const byKey = await app.inject({ method: 'GET', url: `/api/analytics/date-range/export?websiteId=${site.id}`, headers: { 'x-api-key': site.apiKey } });
    expect(byKey.statusCode).toBe(401);
    const bad = await app.inject({ method: 'GET', url: `/api/analytics/date-range/export?websiteId=${site.id}&startDate=2026-04-05&endDate=2026-04-01`, headers: admin });
    expect(bad.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { startDate: ['Start date must not be after end date'] } });
    const unknown = await app.inject({ method: 'GET', url: `/api/analytics/date-range/export?websiteId=${randomUUID()}`, headers: admin });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.headers['content-type']).toContain('application/json');
  });

  it('feedback as CSV with the list filters; every row, text as typed, formulas defused', async () => {
    const websiteId = (await createWebsite(app, 'Feedback export')).id;
    const submitted: string[] = [];
    for (const [index, comment] of ['A plain comment here', 'Has, a comma and "quotes"', '=cmd|calc comment text'].entries()) {
      const response = await app.inject({
        method: 'POST',
        url: '/api/feedback',
        payload: { name: `Person ${index}`, email: `p${index}@example.test`, comment, rating: 3 + index, websiteId },
      });
      expect(response.statusCode).toBe(201);
      submitted.push(response.json().data.id);
    }
    await app.inject({ method: 'PUT', url: `/api/feedback/${submitted[0]}`, headers: admin, payload: { status: 'resolved', adminNotes: 'done' } });

    const all = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}`, headers: admin });
    expect(all.statusCode).toBe(200);
    expect(all.headers['content-type']).toBe('text/csv; charset=utf-8');
    const rows = parseCsv(all.body);
    expect(rows[0]).toEqual(['id', 'createdAt', 'updatedAt', 'status', 'rating', 'category', 'name', 'email', 'comment', 'location', 'websiteId', 'adminNotes', 'resolvedBy', 'resolvedAt']);
    expect(rows.slice(1).map((row) => row[0])).toEqual([...submitted].reverse());
    const byId = new Map(rows.slice(1).map((row) => [row[0], row]));
    expect(byId.get(submitted[1])?.[8]).toBe('Has, a comma and "quotes"');
    expect(byId.get(submitted[2])?.[8]).toBe("'=cmd|calc comment text");
    expect(byId.get(submitted[0])?.slice(3, 5)).toEqual(['resolved', '3']);

    const list = await app.inject({ method: 'GET', url: `/api/feedback/get-feedback?websiteId=${websiteId}&status=pending`, headers: admin });
    const pending = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}&status=pending`, headers: admin });
    expect(parseCsv(pending.body).slice(1).map((row) => row[0])).toEqual(list.json().data.map((item: { id: string }) => item.id));
    const oldestFirst = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}&order=asc`, headers: admin });
    expect(parseCsv(oldestFirst.body).slice(1).map((row) => row[0])).toEqual(submitted);

    const bad = await app.inject({ method: 'GET', url: '/api/feedback/export?status=open', headers: admin });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ success: false, error: 'Validation failed', details: { status: expect.any(Array) } });
    expect((await app.inject({ method: 'GET', url: '/api/feedback/export' })).statusCode).toBe(401);
  });

  it('a large export is chunked (no content-length) and holds every row', async () => {
    const websiteId = (await createWebsite(app, 'Many')).id;
    await sql`
      insert into public.feedback (name, email, comment, rating, website_id)
      select 'Bulk ' || g, 'bulk@example.test', 'Bulk comment number ' || g, 1 + g % 5, ${websiteId}
        from generate_series(1, 5000) g`;
    const response = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}`, headers: admin });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-length']).toBeUndefined();
    expect(parseCsv(response.body)).toHaveLength(5001);
  });
});

describe('an export larger than the server may hold', () => {
  it('is streamed in chunks: a server with a 64 MiB heap sends 120 MB of feedback in full', { timeout: 120_000 }, async () => {
    // Read into memory before it is written, the export would end the process (heap out of memory).
    const port = await freePort();
    const server = startServer({
      NODE_ENV: 'development',
      NODE_OPTIONS: '--max-old-space-size=64',
      DATABASE_URL: inject('stack').databaseUrl,
      ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
      PORT: String(port),
      LOG_LEVEL: 'warn',
    });
    const base = `http://127.0.0.1:${port}`;
    let websiteId: string | undefined;
    try {
      await untilHealthy(server, base, 20_000);
      const admin = await legacyAdmin();
      const created = await fetch(`${base}/api/websites`, {
        method: 'POST',
        headers: { ...admin, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'Larger than the heap', domain: `${randomUUID().slice(0, 8)}.example.test` }),
      });
      const website = ((await created.json()) as { data: { id: string } }).data.id;
      websiteId = website; // for the clean-up
      const COMMENT_CHARS = 20_000;
      await sql`
        insert into public.feedback (name, email, comment, rating, website_id)
        select 'Bulk ' || g, 'bulk@example.test', repeat('A long comment. ', ${COMMENT_CHARS / 16}), 3, ${website}
          from generate_series(1, 6000) g`;

      const response = await fetch(`${base}/api/feedback/export?websiteId=${website}`, { headers: admin });
      expect(response.status).toBe(200);
      let bytes = 0;
      let lineEnds = 0;
      try {
        for await (const chunk of response.body as AsyncIterable<Uint8Array>) {
          bytes += chunk.byteLength;
          for (const byte of chunk) if (byte === 10) lineEnds += 1;
        }
      } catch (error) {
        // A cut download says only "other side closed": the server's log says why (a heap out of memory, a failed chunk).
        throw new Error(`the download was cut after ${bytes} bytes (${error}); exit code ${server.child.exitCode}; the server wrote:\n${server.output()}`);
      }
      expect(lineEnds).toBe(6001);
      expect(bytes).toBeGreaterThan(6000 * COMMENT_CHARS);
      expect(server.child.exitCode).toBeNull();
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
      if (websiteId) await sql`delete from public.feedback where website_id = ${websiteId}`;
    }
  });
});

describe('an export whose client stops reading', () => {
  it('is cut after EXPORT_STALL_MS, and holds no database connection while its client stalls', async () => {
    // One pooled connection: an export holding it while its client stalls would starve every other request.
    const stalledApp = await buildTestApp({ EXPORT_STALL_MS: '300', DATABASE_POOL_MAX: '1', DATABASE_ACQUIRE_TIMEOUT_MS: '1000' });
    const client = new net.Socket();
    let websiteId: string | undefined;
    try {
      await stalledApp.listen({ host: '127.0.0.1', port: 0 });
      const admin = await legacyAdmin();
      websiteId = (await createWebsite(stalledApp, 'Stalled export')).id;
      // About 20 MB of CSV: far more than the sockets between server and client buffer.
      await sql`
        insert into public.feedback (name, email, comment, rating, website_id)
        select 'Bulk ' || g, 'bulk@example.test', repeat('A long comment. ', 1250), 3, ${websiteId}
          from generate_series(1, 1000) g`;

      // A client that sends its request and never reads past what the socket takes in on its own.
      const requestId = `stalled-export-${randomUUID()}`;
      client.connect((stalledApp.server.address() as AddressInfo).port, '127.0.0.1');
      client.write(
        `GET /api/feedback/export?websiteId=${websiteId} HTTP/1.1\r\nHost: 127.0.0.1\r\n` +
          `Authorization: ${admin.authorization}\r\nX-Request-Id: ${requestId}\r\n\r\n`,
      );
      await waitFor(() => client.readableLength > 0, 5_000, 'the download to start');

      // The export reads in chunks, each a transaction of its own: while it waits on its client it
      // holds no connection, so the next request gets the pool's one (holding it, the export left
      // this request a 503 after DATABASE_ACQUIRE_TIMEOUT_MS).
      expect((await stalledApp.inject({ method: 'GET', url: '/api/websites', headers: admin })).statusCode).toBe(200);

      // The stall is noticed and the download cut (said once, at warn) ...
      const cutLogged = async () => {
        await stalledApp.appLogs.flush();
        return sql`select level::text, message from public.app_logs where request_id = ${requestId}`;
      };
      await waitFor(async () => (await cutLogged()).length > 0, 5_000, 'the download to be cut');
      expect(await cutLogged()).toEqual([{ level: 'warn', message: expect.stringContaining('client stopped reading') }]);

      // ... not finished: reading on, the client gets the connection's end long before 20 MB.
      let received = client.readableLength;
      const ended = new Promise<void>((resolve) => client.once('close', () => resolve()));
      client.on('data', (chunk: Buffer) => (received += chunk.length));
      await ended;
      expect(received).toBeLessThan(15 * 1024 * 1024);
    } finally {
      client.destroy();
      await stalledApp.close();
      if (websiteId) await sql`delete from public.feedback where website_id = ${websiteId}`;
    }
  });
});
