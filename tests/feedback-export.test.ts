import type { FastifyInstance } from 'fastify';
import { afterAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import type { ExportFeedbackQuery } from '../src/modules/feedback/schemas.ts';
import { createFeedbackService, FEEDBACK_CSV_COLUMNS } from '../src/modules/feedback/service.ts';
import type { Caller } from '../src/plugins/auth.ts';
import { connectDatabase } from '../src/plugins/db.ts';
import { legacyAdmin, useAdminApp } from './support/admin-auth.ts';
import { buildTestApp } from './support/app.ts';
import { createAuthUser, grantRole, testSql } from './support/db.ts';
import { createWebsite, feedbackBody } from './support/feedback-fixtures.ts';

// The feedback CSV holds the words as typed: the HTML escaping applied at
// input is for HTML, and a spreadsheet shows `&lt;` as it is. It is read in
// keyset chunks, each a short statement of its own, so neither the size of
// the table nor a slow client meets the statement timeout. Filters,
// streaming and refusals are in tests/exports.test.ts.

const sql = testSql();
let app: FastifyInstance;
let admin: { authorization: string };

useAdminApp(sql, (built) => ({ app, admin } = built));

/** Submits and triages one feedback item; the export's line for it, without its line end. */
async function exportedLine(websiteId: string, body: Record<string, unknown>, triage: Record<string, unknown>) {
  const created = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody({ websiteId, ...body }) });
  expect(created.statusCode, created.body).toBe(201);
  const id: string = created.json().data.id;
  const updated = await app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: admin, payload: triage });
  expect(updated.statusCode, updated.body).toBe(200);
  const response = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}`, headers: admin });
  expect(response.statusCode).toBe(200);
  const [row] = await sql<{ created_at: Date; updated_at: Date; resolved_at: Date }[]>`
    select created_at, updated_at, resolved_at from public.feedback where id = ${id}`;
  const lines = response.body.split('\r\n');
  expect(lines).toHaveLength(3);
  // A UTF-8 byte order mark first, for Excel on Windows (docs/feedback.md).
  expect(lines[0].startsWith('\uFEFFid,')).toBe(true);
  return { id, row, line: lines[1] };
}

describe('GET /api/feedback/export: plain text', () => {
  it('every text column is unescaped: the cells read as the submitter and the admin typed them', async () => {
    const websiteId = await createWebsite(sql, 'Plain export');
    const { id, row, line } = await exportedLine(
      websiteId,
      {
        name: 'Sam <b>6</b>',
        email: "o'brien+export@example.test",
        comment: 'He said "hi" & left <early>',
        location: 'https://example.com/contact?x=1&y=2',
        category: 'Bug Report',
      },
      { status: 'resolved', adminNotes: 'Fixed in <v2> & more', resolvedBy: "Ann O'Neil" },
    );
    const [createdAt, updatedAt, resolvedAt] = [row.created_at, row.updated_at, row.resolved_at].map((at) => at.toISOString());
    expect(line).toBe(
      `${id},${createdAt},${updatedAt},resolved,4,Bug Report,Sam <b>6</b>,o'brien+export@example.test,"He said ""hi"" & left <early>",` +
        `https://example.com/contact?x=1&y=2,${websiteId},Fixed in <v2> & more,Ann O'Neil,${resolvedAt}`,
    );
  });

  it('formulas are still defused after unescaping', async () => {
    const websiteId = await createWebsite(sql, 'Formula export');
    const { line } = await exportedLine(
      websiteId,
      // Stored as `=HYPERLINK(&quot;...`, `=cmd|&#39; /C calc&#39;!A0`: the formula comes back with the unescaping.
      { name: '=HYPERLINK("https://evil.example","x")', comment: "=cmd|' /C calc'!A0 & more" },
      { status: 'resolved', adminNotes: '@SUM(1+1) <x>', resolvedBy: "+1 'ops'" },
    );
    const cells = line.split(',');
    expect(line).toContain(`,"'=HYPERLINK(""https://evil.example"",""x"")",`);
    expect(line).toContain(`,'=cmd|' /C calc'!A0 & more,`);
    expect(cells.slice(-3, -1)).toEqual(["'@SUM(1+1) <x>", "'+1 'ops'"]);
  });
});

/** The claims-bearing caller of a signed-in user (the export then runs as `authenticated`, under row-level security). */
async function userCaller(admin: boolean): Promise<Caller> {
  const user = await createAuthUser(sql);
  if (admin) await grantRole(sql, user.id, 'admin');
  const sessionId = crypto.randomUUID();
  // The app's guard would refuse the one without the role; the service is given it to show that row-level security refuses too.
  return { kind: 'user', userId: user.id, sessionId, roles: ['admin'], claims: { sub: user.id, role: 'authenticated', aud: 'authenticated', session_id: sessionId } };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('the feedback export, read in chunks', () => {
  // A pool whose statements may run 300 ms, and an export of three rows a chunk.
  const db = connectDatabase(asLoginRole(inject('stack').databaseUrl), { max: 2, statementTimeoutMs: 300 });
  afterAll(() => db.close());
  const feedback = createFeedbackService({ db, captcha: { enabled: false, verify: async () => 'passed' }, exportChunkRows: 3 });

  /** The ids the service exports for `query` as `caller`, through a client that takes about 1 ms a row. */
  async function exportedIds(caller: Caller, query: Partial<ExportFeedbackQuery>): Promise<string[]> {
    const ids: string[] = [];
    await feedback.exportFeedback(caller, { order: 'desc', ...query } as ExportFeedbackQuery, {
      async write(values) {
        ids.push(String(values[0]));
        if (ids.length % 3 === 0) await sleep(3);
        return true;
      },
    });
    return ids;
  }

  it('every matching row once, in the list\'s order, ties in created_at and microseconds across chunk boundaries included', { timeout: 60_000 }, async () => {
    const [websiteId, otherSite] = [await createWebsite(sql, 'Chunked export'), await createWebsite(sql, 'Not exported')];
    onTestFinished(async () => void (await sql`delete from public.feedback where website_id in ${sql([websiteId, otherSite])}`));
    // Four rows share each created_at, 250 µs apart: chunks of three end inside a tie,
    // and four instants share a millisecond (a Date as the position would lose them).
    // More than the old cursor's 500-row batch, read over more than the statement timeout.
    await sql`
      insert into public.feedback (name, email, comment, rating, status, resolved_at, website_id, created_at)
      select 'Chunk ' || g, 'chunk@example.test', 'A comment in a chunk', 1 + g % 5,
             (array['pending', 'resolved', 'archived'])[1 + g % 3]::public.feedback_status,
             case when g % 3 = 1 then now() end,
             case when g % 50 = 0 then ${otherSite}::uuid else ${websiteId}::uuid end,
             timestamptz '2026-05-01 12:00:00.000001+00' + (g / 4) * interval '250 microseconds'
        from generate_series(1, 630) g`;
    const expected = async (status: string | null, order: 'asc' | 'desc') =>
      (
        await sql<{ id: string }[]>`
          select id from public.feedback
           where website_id = ${websiteId} and (${status}::public.feedback_status is null or status = ${status}::public.feedback_status)
           order by created_at ${order === 'asc' ? sql`asc` : sql`desc`}, id ${order === 'asc' ? sql`asc` : sql`desc`}`
      ).map((row) => row.id);

    const admin = await userCaller(true);
    const all = await exportedIds(admin, { websiteId });
    expect(all).toHaveLength(630 - 12);
    expect(all).toEqual(await expected(null, 'desc'));
    expect(await exportedIds(admin, { websiteId, order: 'asc' })).toEqual(await expected(null, 'asc'));
    for (const status of ['resolved', 'archived'] as const) {
      for (const order of ['asc', 'desc'] as const) {
        const ids = await exportedIds(admin, { websiteId, status, order });
        expect(ids.length).toBeGreaterThan(3);
        expect(ids).toEqual(await expected(status, order));
      }
    }
    // Every chunk runs as the caller: a signed-in user without the admin role reads no row of it, and the export says so.
    await expect(exportedIds(await userCaller(false), { websiteId })).rejects.toMatchObject({ statusCode: 403 });
    // An admin whose role goes during the export gets no row after that, and a cut, not a file that looks whole.
    const demoted = await userCaller(true);
    const written: string[] = [];
    const cut = feedback.exportFeedback(demoted, { order: 'desc', websiteId } as ExportFeedbackQuery, {
      async write(values) {
        written.push(String(values[0]));
        if (written.length === 3) await sql`delete from public.user_roles where user_id = ${demoted.userId}`;
        return true;
      },
    });
    await expect(cut).rejects.toMatchObject({ statusCode: 403 });
    expect(written).toEqual(all.slice(0, 3));
  });
});

describe('the feedback export, chunks bounded by their text', () => {
  const db = connectDatabase(asLoginRole(inject('stack').databaseUrl), { max: 2 });
  afterAll(() => db.close());

  it('a chunk holds the rows that begin within its bytes of text, at least one, and every row is written once, in order', async () => {
    const websiteId = await createWebsite(sql, 'Export of long rows');
    onTestFinished(async () => void (await sql`delete from public.feedback where website_id = ${websiteId}`));
    // Comments of 1,000 bytes, but the tenth of 6,000: more than a chunk's 2,500 bytes alone.
    await sql`
      insert into public.feedback (name, email, comment, rating, website_id, created_at)
      select 'Long ' || g, 'long@example.test', repeat('x', case when g = 10 then 6000 else 1000 - 7 - 17 end), 3,
             ${websiteId}, timestamptz '2026-06-01 00:00:00+00' + g * interval '1 second'
        from generate_series(1, 30) g`;
    const chunks: number[] = [];
    const counted = { ...db, readAtOnceAsActor: db.readAtOnceAsActor } as typeof db;
    counted.readAtOnceAsActor = async (actor, work, options) => {
      const result = await db.readAtOnceAsActor(actor, work, options);
      const { rows } = result as { rows?: unknown[] };
      if (rows) chunks.push(rows.length);
      return result;
    };
    const feedback = createFeedbackService({ db: counted, captcha: { enabled: false, verify: async () => 'passed' }, exportChunkRows: 500, exportChunkTextBytes: 2_500 });
    const names: string[] = [];
    await feedback.exportFeedback(await userCaller(true), { order: 'asc', websiteId } as ExportFeedbackQuery, {
      async write(values) {
        names.push(String(values[FEEDBACK_CSV_COLUMNS.findIndex(([header]) => header === 'name')]));
        return true;
      },
    });
    expect(names).toEqual(Array.from({ length: 30 }, (_, i) => `Long ${i + 1}`));
    // Three rows begin within 2,500 bytes (at 0, 1,000 and 2,000); the long tenth row is a chunk of its own.
    expect(chunks).toEqual([3, 3, 3, 1, 3, 3, 3, 3, 3, 3, 2]);
  });
});

describe('GET /api/feedback/export: a slow client', () => {
  it('gets the whole file although the download takes longer than the statement timeout', { timeout: 60_000 }, async () => {
    const slowApp = await buildTestApp({ DATABASE_STATEMENT_TIMEOUT_MS: '300' });
    const websiteId = await createWebsite(sql, 'Slow client export');
    try {
      await slowApp.listen({ host: '127.0.0.1', port: 0 });
      const { port } = slowApp.server.address() as { port: number };
      // About 20 MB of CSV, more than the sockets between server and client buffer, in many chunks.
      await sql`
        insert into public.feedback (name, email, comment, rating, website_id)
        select 'Bulk ' || g, 'bulk@example.test', repeat('A longer comment. ', 100), 3, ${websiteId}
          from generate_series(1, 10000) g`;
      const response = await fetch(`http://127.0.0.1:${port}/api/feedback/export?websiteId=${websiteId}`, { headers: await legacyAdmin() });
      expect(response.status).toBe(200);
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      let lineEnds = 0;
      let reads = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        for (const byte of value) if (byte === 10) lineEnds += 1;
        // The client stops reading for a second once the download is under way.
        if (++reads === 2) await sleep(1_000);
      }
      expect(lineEnds).toBe(10_001);
    } finally {
      await slowApp.close();
      await sql`delete from public.feedback where website_id = ${websiteId}`;
    }
  });
});
