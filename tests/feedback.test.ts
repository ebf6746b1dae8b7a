import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { FeedbackSchema, ListFeedbackResponseSchema } from '../src/modules/feedback/schemas.ts';
import { createWebsite, feedbackBody, ISO_MS, pngDataUrl } from './support/feedback-fixtures.ts';
import { openTransaction, testSql, untilWaitingOnLock } from './support/db.ts';

// Feedback routes (SPEC section 4) through the app against the real database.
// Test apps run no notification worker unless asked (FEEDBACK_OUTBOX_WORKER);
// tests/feedback-outbox.test.ts covers it. Row-level security is in
// tests/feedback-rls.test.ts, screenshots in tests/feedback-screenshots.test.ts.

const sql = testSql();
let app: FastifyInstance;
let adminToken: string;
const ADMIN_ID = 'ops-admin-feedback-tests';

beforeAll(async () => {
  app = await buildTestApp();
  adminToken = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, ADMIN_ID);
});
afterAll(async () => {
  await app?.close();
  await sql.end();
});

const submit = (body: unknown, url = '/api/feedback') => app.inject({ method: 'POST', url, payload: body as object });
const adminHeaders = () => ({ authorization: `Bearer ${adminToken}` });
const list = (query: string, url = '/api/feedback/get-feedback') =>
  app.inject({ method: 'GET', url: `${url}?${query}`, headers: adminHeaders() });
const update = (id: string, body: unknown) =>
  app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: adminHeaders(), payload: body as object });

async function submitted(overrides: Record<string, unknown> = {}, url?: string): Promise<string> {
  const response = await submit(feedbackBody(overrides), url);
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

describe('POST /api/feedback (public submission)', () => {
  it('creates pending feedback: 201 {success, message, data: {id, status}}', async () => {
    const response = await submit(feedbackBody({ location: 'https://example.test/contact', category: 'Bug Report' }));
    expect(response.statusCode).toBe(201);
    const body = response.json();
    expect(body).toEqual({ success: true, message: 'Feedback submitted successfully', data: { id: expect.any(String), status: 'pending' } });
    const [row] = await sql`select status, category, location from public.feedback where id = ${body.data.id}`;
    expect(row).toEqual({ status: 'pending', category: 'Bug Report', location: 'https://example.test/contact' });
    // The notification is owed from the same transaction on.
    // (Another test file's worker may already be sending it, so only its existence is checked.)
    const outbox = await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = ${body.data.id}`;
    expect(outbox).toEqual([{ n: 1 }]);
  });

  it('an optional field sent as null or as an empty string is not given (forms send empty fields so)', async () => {
    for (const empty of [null, '']) {
      const response = await submit(feedbackBody({ location: empty, category: empty, screenshot: empty, websiteId: empty, captchaToken: empty }));
      expect(response.statusCode, `${JSON.stringify(empty)}: ${response.body}`).toBe(201);
      const [row] = await sql`select location, category, screenshot, website_id from public.feedback where id = ${response.json().data.id}`;
      expect(row).toEqual({ location: null, category: null, screenshot: null, website_id: null });
    }
    // A value that is there is still checked.
    const wrong = await submit(feedbackBody({ location: 'about', category: 'Praise' }));
    expect(wrong.json().details).toEqual({ location: ['Location must be an http(s) URL'], category: ['Category must be one of: Bug Report, Feature Request, General Feedback'] });
  });

  it('the legacy /api/feedback/submit-feedback has the same contract', async () => {
    const response = await submit(feedbackBody(), '/api/feedback/submit-feedback');
    expect(response.statusCode).toBe(201);
    expect(response.json()).toMatchObject({ success: true, data: { status: 'pending' } });
    const invalid = await submit({ name: 'x' }, '/api/feedback/submit-feedback');
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json().error).toBe('Validation failed');
  });

  it('missing required fields → 400 Validation failed with details per field', async () => {
    const response = await submit({});
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({
      success: false,
      error: 'Validation failed',
      statusCode: 400,
      details: {
        name: ['Name is required'],
        email: ['Email is required'],
        comment: ['Comment is required'],
        rating: ['Rating is required'],
      },
    });
  });

  it.each([
    ['name', { name: 'A' }, 'Name must be at least 2 characters'],
    ['name', { name: '  A  ' }, 'Name must be at least 2 characters'],
    ['email', { email: 'not-an-email' }, 'Invalid email format'],
    ['email', { email: 'a@b' }, 'Invalid email format'],
    ['comment', { comment: 'too short' }, 'Comment must be at least 10 characters'],
    ['rating', { rating: 0 }, 'Rating must be an integer from 1 to 5'],
    ['rating', { rating: 6 }, 'Rating must be an integer from 1 to 5'],
    ['rating', { rating: 3.5 }, 'Rating must be an integer from 1 to 5'],
    ['rating', { rating: '4' }, 'Rating must be an integer from 1 to 5'],
    ['location', { location: 'javascript:alert(1)' }, 'Location must be an http(s) URL'],
    ['location', { location: 'not a url' }, 'Location must be an http(s) URL'],
    ['category', { category: 'Complaint' }, 'Category must be one of: Bug Report, Feature Request, General Feedback'],
    ['websiteId', { websiteId: 'site-1' }, 'Website id must be a UUID'],
  ])('invalid %s (%j) → 400 with that field in details', async (field, overrides, message) => {
    const response = await submit(feedbackBody(overrides));
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ success: false, error: 'Validation failed', details: { [field]: [message] } });
  });

  // The feedback routes take bodies of 7 MB, for a screenshot. An e-mail of
  // millions of characters overflowed the stack in the address pattern (a 500),
  // and a location of as many was parsed as a URL before its length was read.
  it('an e-mail or location of millions of characters → 400 naming the field once, from either route', async () => {
    const oversized = [
      ['email', `${'a.'.repeat(3_000_000)}@`, 'Invalid email format'],
      ['email', `a@${'a.'.repeat(3_000_000)}1`, 'Invalid email format'],
      ['location', `https://example.test/${'a'.repeat(6_800_000)}`, 'Location must be at most 2048 characters'],
    ];
    for (const url of ['/api/feedback', '/api/feedback/submit-feedback']) {
      for (const [field, value, message] of oversized) {
        const response = await submit(feedbackBody({ [field]: value }), url);
        expect(response.statusCode, `${url} ${field} of ${value.length}: ${response.body.slice(0, 200)}`).toBe(400);
        expect(response.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { [field]: [message] } });
      }
    }
    // Just over the limit, malformed: one message, not the length's and the pattern's both.
    const response = await submit(feedbackBody({ email: 'x'.repeat(300) }));
    expect(response.json().details).toEqual({ email: ['Invalid email format'] });
  });

  // An unpaired surrogate (half an emoji, JSON "\ud800") was stored as U+FFFD
  // with a 201. The body parser refuses it before the schema does
  // (plugins/json-body.ts; the schema's own refusal: src/modules/feedback/schemas.test.ts);
  // either way, on the field.
  it.each([
    ['name', { name: 'Ann \ud800' }],
    ['email', { email: 'ann\udc00@example.test' }],
    ['comment', { comment: 'Half an emoji \ud83d, then the rest' }],
    ['location', { location: 'https://example.test/\udfff' }],
  ])('%s with an unpaired surrogate → 400 naming the field, nothing stored', async (field, overrides) => {
    const websiteId = await createWebsite(sql);
    const response = await submit(feedbackBody({ websiteId, ...overrides }));
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ success: false, error: 'Validation failed', statusCode: 400 });
    expect(Object.keys(response.json().details)).toEqual([field]);
    expect(await sql`select id from public.feedback where website_id = ${websiteId}`).toEqual([]);
  });

  it('accepts RFC 5322 addresses beyond the everyday shape', async () => {
    for (const email of ["o'brien+feedback@example.test", 'first.last@sub.example.test', 'josé@example.test', '"john doe"@example.test', '"a\\"b"@example.test', 'x@[192.0.2.1]', 'a&b{c}|d~@example.test', 'x@example.xn--p1ai']) {
      expect((await submit(feedbackBody({ email }))).statusCode, email).toBe(201);
    }
  });

  it('refuses what RFC 5322 does not allow: control characters, a bare quote inside quotes, dots out of place', async () => {
    const websiteId = await createWebsite(sql);
    for (const email of ['a\u0001b@example.test', 'a\u007fb@example.test', '"a\u0008"@example.test', '"a"b"@example.test', 'a..b@example.test', 'a b@example.test']) {
      const response = await submit(feedbackBody({ websiteId, email }));
      expect(response.statusCode, JSON.stringify(email)).toBe(400);
      expect(response.json().details, JSON.stringify(email)).toEqual({ email: ['Invalid email format'] });
    }
    expect(await sql`select id from public.feedback where website_id = ${websiteId}`).toEqual([]);
  });

  it('escapes HTML before storage: a <script> comes back as text, not markup', async () => {
    const comment = '<script>alert("x")</script> & it\'s broken';
    const name = '<b>Eve</b>';
    const websiteId = await createWebsite(sql);
    const id = await submitted({ comment, name, websiteId, location: 'https://example.test/?a=1&b=<2>' });
    const [row] = await sql`select name, comment, location from public.feedback where id = ${id}`;
    expect(row.comment).toBe('&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; it&#39;s broken');
    expect(row.name).toBe('&lt;b&gt;Eve&lt;/b&gt;');
    expect(row.comment).not.toContain('<');
    // Round trip: the admin list returns what was stored.
    const [listed] = (await list(`websiteId=${websiteId}`)).json().data;
    expect(listed).toMatchObject({ id, comment: row.comment, name: row.name, location: row.location });
    expect(listed.location).toBe('https://example.test/?a=1&amp;b=&lt;2&gt;');
  });

  it('links feedback to an existing website; an unknown website → 400 with details', async () => {
    const websiteId = await createWebsite(sql);
    const id = await submitted({ websiteId });
    expect((await sql`select website_id from public.feedback where id = ${id}`)[0].website_id).toBe(websiteId);

    const unknown = await submit(feedbackBody({ websiteId: crypto.randomUUID() }));
    expect(unknown.statusCode).toBe(400);
    expect(unknown.json()).toEqual({
      success: false,
      error: 'Validation failed',
      statusCode: 400,
      details: { websiteId: ['Website not found'] },
    });

    // A website whose deletion has begun is gone from the API: the same answer, nothing stored.
    const leaving = await createWebsite(sql);
    await sql`update public.websites set deletion_started_at = now() where id = ${leaving}`;
    const refused = await submit(feedbackBody({ websiteId: leaving }), '/api/feedback/submit-feedback');
    expect(refused.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { websiteId: ['Website not found'] } });
    expect(await sql`select id from public.feedback where website_id = ${leaving}`).toEqual([]);
  });

  it('a submission checked while its website is being marked for deletion waits for the mark, and is refused', async () => {
    const websiteId = await createWebsite(sql);
    // What begin_website_deletion writes, committed only once the submission is under way.
    const mark = await openTransaction(
      sql,
      (tx) => tx`update public.websites set deletion_started_at = now(), api_key_hash = sha256(uuid_send(gen_random_uuid())) where id = ${websiteId}`,
    );
    const submission = submit(feedbackBody({ websiteId }));
    expect(await untilWaitingOnLock(sql, 'insert into public.feedback')).toBe(true);
    await mark.commit();
    expect((await submission).json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { websiteId: ['Website not found'] } });
    expect(await sql`select id from public.feedback where website_id = ${websiteId}`).toEqual([]);
  });
});

describe('GET /api/feedback/get-feedback (admin list)', () => {
  let websiteId: string;
  const ids: string[] = [];

  beforeAll(async () => {
    // Feedback of a website of this test's own: the list filtered by it is exactly these rows.
    websiteId = await createWebsite(sql, 'List test site');
    for (let i = 0; i < 5; i += 1) ids.push(await submitted({ websiteId, comment: `Feedback number ${i} for the list` }));
  });

  it('returns every field, null where unset, ISO timestamps with ms, newest first', async () => {
    const response = await list(`websiteId=${websiteId}`);
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body.success).toBe(true);
    expect(body.pagination).toEqual({ total: 5, limit: 20, offset: 0 });
    expect(body.data.map((item: { id: string }) => item.id)).toEqual([...ids].reverse());
    const item = body.data[0];
    // Every field of the SPEC's Feedback, and beside them only the screenshot's type and size
    // (the list carries a reference to the image, not the image: docs/feedback.md).
    expect(Object.keys(item).sort()).toEqual(
      [
        'adminNotes', 'category', 'comment', 'createdAt', 'email', 'id', 'location', 'name', 'rating', 'resolvedAt', 'resolvedBy', 'screenshot', 'status', 'updatedAt', 'websiteId',
        'screenshotType', 'screenshotSize',
      ].sort(),
    );
    expect(item).toMatchObject({
      status: 'pending',
      rating: 4,
      websiteId,
      adminNotes: null,
      resolvedBy: null,
      resolvedAt: null,
      location: null,
      category: null,
      screenshot: null,
    });
    expect(item.createdAt).toMatch(ISO_MS);
    expect(item.updatedAt).toMatch(ISO_MS);
  });

  it('each item holds exactly what its row holds: text as stored, timestamps as toISOString writes them', async () => {
    // Field by field against the row itself, and against the route's response schema:
    // text that JSON must escape, microseconds that toISOString drops, both screenshot types.
    const site = await createWebsite(sql, 'Every field');
    const awkward = `Quote " back\\slash\nnew line\ttab \u0001 control, snowman \u2603, emoji \u{1F600}, </script>`;
    const rows = await sql<Record<string, unknown>[]>`
      insert into public.feedback
        (name, email, comment, rating, status, location, category, screenshot, admin_notes, resolved_by, resolved_at, website_id, created_at)
      values
        (${awkward}, 'every@example.test', ${`Comment: ${awkward}`}, 2, 'resolved', 'https://example.test/a?b=c&d', 'Bug Report',
         ${pngDataUrl(10)}, ${awkward}, 'Ada', '2026-01-02 03:04:05.678999+00', ${site}, '2025-12-31 23:59:59.999999+00'),
        ('Plain Row', 'plain@example.test', 'A plain comment row.', 5, 'pending', null, null,
         'data:image/SVG;base64,AAAA', null, null, null, ${site}, '2025-12-31 23:59:58.000001+00')
      returning *`;
    const iso = (value: unknown) => (value === null ? null : (value as Date).toISOString());
    const expected = rows.map((row) => ({
      id: row.id,
      name: row.name,
      email: row.email,
      comment: row.comment,
      rating: row.rating,
      status: row.status,
      location: row.location,
      category: row.category,
      screenshot: `/api/feedback/${row.id}/screenshot`,
      screenshotType: row.screenshot_type ?? 'application/octet-stream',
      screenshotSize: row.screenshot_bytes,
      adminNotes: row.admin_notes,
      resolvedBy: row.resolved_by,
      resolvedAt: iso(row.resolved_at),
      websiteId: site,
      createdAt: iso(row.created_at),
      updatedAt: iso(row.updated_at),
    }));
    expect(expected.map((item) => [item.screenshotType, item.screenshotSize, item.resolvedAt, item.createdAt])).toEqual([
      ['image/png', 10, '2026-01-02T03:04:05.678Z', '2025-12-31T23:59:59.999Z'],
      ['application/octet-stream', 3, null, '2025-12-31T23:59:58.000Z'],
    ]);

    const response = await list(`websiteId=${site}`);
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/json; charset=utf-8');
    const body = response.json();
    expect(body).toEqual({ success: true, data: expected, pagination: { total: 2, limit: 20, offset: 0 } });
    expect(ListFeedbackResponseSchema.safeParse(body).success).toBe(true);
    // Nothing the schema does not name: every item has exactly its keys.
    expect(body.data.map((item: object) => Object.keys(item))).toEqual(expected.map(() => Object.keys(FeedbackSchema.shape)));
  });

  it('an empty page is an empty array, with the total still counted', async () => {
    const site = await createWebsite(sql, 'Empty page');
    await submitted({ websiteId: site });
    const response = await list(`websiteId=${site}&offset=5`);
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ success: true, data: [], pagination: { total: 1, limit: 20, offset: 5 } });
    expect((await list(`websiteId=${await createWebsite(sql, 'No feedback')}`)).json()).toEqual({
      success: true,
      data: [],
      pagination: { total: 0, limit: 20, offset: 0 },
    });
  });

  it('pages with limit and offset; total counts every match', async () => {
    const first = (await list(`websiteId=${websiteId}&limit=2&offset=0`)).json();
    const second = (await list(`websiteId=${websiteId}&limit=2&offset=2`)).json();
    const last = (await list(`websiteId=${websiteId}&limit=2&offset=4`)).json();
    const beyond = (await list(`websiteId=${websiteId}&limit=2&offset=10`)).json();
    expect(first.pagination).toEqual({ total: 5, limit: 2, offset: 0 });
    expect(beyond.pagination).toEqual({ total: 5, limit: 2, offset: 10 });
    expect(beyond.data).toEqual([]);
    const paged = [...first.data, ...second.data, ...last.data].map((item: { id: string }) => item.id);
    expect(paged).toEqual([...ids].reverse());
    expect((await list(`websiteId=${websiteId}&limit=100`)).json().pagination.limit).toBe(100);
  });

  it('order=asc pages oldest first, for triage; another order is 400', async () => {
    const first = (await list(`websiteId=${websiteId}&order=asc&limit=3`)).json();
    const rest = (await list(`websiteId=${websiteId}&order=asc&limit=3&offset=3`)).json();
    expect([...first.data, ...rest.data].map((item: { id: string }) => item.id)).toEqual(ids);
    expect((await list(`websiteId=${websiteId}&order=desc&limit=1`)).json().data[0].id).toBe(ids.at(-1));
    const bad = await list(`websiteId=${websiteId}&order=newest`);
    expect(bad.statusCode).toBe(400);
    expect(bad.json().details).toEqual({ order: ['Order must be desc (newest first) or asc (oldest first)'] });
  });

  it('filters by status', async () => {
    expect((await update(ids[0], { status: 'resolved' })).statusCode).toBe(200);
    expect((await update(ids[1], { status: 'archived' })).statusCode).toBe(200);
    const resolved = (await list(`websiteId=${websiteId}&status=resolved`)).json();
    expect(resolved.pagination.total).toBe(1);
    expect(resolved.data[0]).toMatchObject({ id: ids[0], status: 'resolved', resolvedBy: ADMIN_ID });
    expect(resolved.data[0].resolvedAt).toMatch(ISO_MS);
    expect((await list(`websiteId=${websiteId}&status=pending`)).json().pagination.total).toBe(3);
    // Without a website filter the status filter still holds for every row.
    const anyPending = (await list('status=pending&limit=100')).json();
    expect(anyPending.data.every((item: { status: string }) => item.status === 'pending')).toBe(true);
    // Paged one at a time (from the second page on, the ids are found first, then the rows), in order, each row once.
    const pending = (await list(`websiteId=${websiteId}&status=pending`)).json().data.map((item: { id: string }) => item.id);
    for (const order of ['desc', 'asc']) {
      const oneByOne: string[] = [];
      for (let offset = 0; offset < pending.length + 1; offset++) {
        const one = (await list(`websiteId=${websiteId}&status=pending&order=${order}&limit=1&offset=${offset}`)).json();
        expect(one.pagination).toEqual({ total: pending.length, limit: 1, offset });
        oneByOne.push(...one.data.map((item: { id: string; status: string }) => item.id));
      }
      expect(oneByOne, order).toEqual(order === 'desc' ? pending : [...pending].reverse());
    }
    // A multi-select's two statuses: the filter takes one, and says so (not "must be one of", which both are).
    const two = await list(`websiteId=${websiteId}&status=pending&status=resolved`);
    expect([two.statusCode, two.json().details]).toEqual([400, { status: ['status must be given once, not 2 times'] }]);
  });

  it('answers at the alias /api/get-feedback too', async () => {
    const direct = (await list(`websiteId=${websiteId}`)).json();
    const alias = await list(`websiteId=${websiteId}`, '/api/get-feedback');
    expect(alias.statusCode).toBe(200);
    expect(alias.json().data.map((item: { id: string }) => item.id)).toEqual(direct.data.map((item: { id: string }) => item.id));
  });

  it.each([['limit=0'], ['limit=101'], ['limit=ten'], ['limit=2.5'], ['offset=-1'], ['status=open'], ['websiteId=nope']])(
    'bad query %s → 400 Validation failed',
    async (query) => {
      const response = await list(query);
      expect(response.statusCode).toBe(400);
      expect(response.json()).toMatchObject({ success: false, error: 'Validation failed', statusCode: 400 });
      expect(Object.keys(response.json().details)).toHaveLength(1);
    },
  );
});

describe('PUT /api/feedback/:id (admin triage)', () => {
  const resolvedAtOf = async (id: string) => (await sql`select resolved_at, resolved_by, status, admin_notes from public.feedback where id = ${id}`)[0];

  it('resolving sets resolvedAt (returned) and resolvedBy defaults to the admin', async () => {
    const id = await submitted();
    const before = Date.now();
    const response = await update(id, { status: 'resolved', adminNotes: 'Fixed in <v2>' });
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body).toEqual({ success: true, message: 'Feedback updated successfully', data: { id, status: 'resolved', resolvedAt: expect.stringMatching(ISO_MS) } });
    expect(Date.parse(body.data.resolvedAt)).toBeGreaterThanOrEqual(before - 1000);
    const row = await resolvedAtOf(id);
    expect(row).toMatchObject({ status: 'resolved', resolved_by: ADMIN_ID, admin_notes: 'Fixed in &lt;v2&gt;' });
  });

  it('resolvedBy may be named; resolving again keeps the first resolvedAt', async () => {
    const id = await submitted();
    const first = (await update(id, { status: 'resolved', resolvedBy: 'Ada' })).json().data;
    expect((await resolvedAtOf(id)).resolved_by).toBe('Ada');
    const again = (await update(id, { status: 'resolved' })).json().data;
    expect(again.resolvedAt).toBe(first.resolvedAt);
    expect((await resolvedAtOf(id)).resolved_by).toBe('Ada');
  });

  it('back to pending clears resolvedAt and resolvedBy; archived is allowed from any state', async () => {
    const id = await submitted();
    await update(id, { status: 'resolved' });
    const pending = await update(id, { status: 'pending' });
    expect(pending.json().data).toEqual({ id, status: 'pending', resolvedAt: null });
    expect(await resolvedAtOf(id)).toMatchObject({ resolved_at: null, resolved_by: null });

    // pending → archived
    expect((await update(id, { status: 'archived' })).json().data).toEqual({ id, status: 'archived', resolvedAt: null });
    // archived → resolved → archived keeps the resolution
    const resolved = (await update(id, { status: 'resolved' })).json().data;
    const archived = (await update(id, { status: 'archived' })).json().data;
    expect(archived).toEqual({ id, status: 'archived', resolvedAt: resolved.resolvedAt });
    // archived → pending
    expect((await update(id, { status: 'pending' })).json().data.status).toBe('pending');
  });

  it('notes alone leave the status as it is', async () => {
    const id = await submitted();
    const response = await update(id, { adminNotes: 'Asked for a screenshot' });
    expect(response.json().data).toEqual({ id, status: 'pending', resolvedAt: null });
    expect((await resolvedAtOf(id)).admin_notes).toBe('Asked for a screenshot');
  });

  it('adminNotes: null clears the notes (the list shows null, as for notes never written)', async () => {
    const id = await submitted();
    expect((await update(id, { adminNotes: 'Call back on Monday' })).statusCode).toBe(200);
    const cleared = await update(id, { adminNotes: null });
    expect(cleared.statusCode, cleared.body).toBe(200);
    expect(cleared.json().data).toEqual({ id, status: 'pending', resolvedAt: null });
    expect((await resolvedAtOf(id)).admin_notes).toBeNull();
    expect((await update(id, { adminNotes: 42 })).json().details).toEqual({ adminNotes: ['Admin notes must be a string'] });
  });

  it.each([
    ['an empty body', {}, 'body'],
    ['an unknown status', { status: 'closed' }, 'status'],
    ['resolvedBy with pending', { status: 'pending', resolvedBy: 'Ada' }, 'resolvedBy'],
    ['resolvedBy on pending feedback', { resolvedBy: 'Ada' }, 'resolvedBy'],
  ])('%s → 400 Validation failed', async (_label, body, field) => {
    const id = await submitted();
    const response = await update(id, body);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ success: false, error: 'Validation failed', statusCode: 400 });
    expect(Object.keys(response.json().details)).toEqual([field]);
  });

  it.each([
    ['adminNotes', { status: 'resolved', adminNotes: 'Half an emoji \ud83d' }],
    ['resolvedBy', { status: 'resolved', resolvedBy: 'Ada \udfff' }],
  ])('%s with an unpaired surrogate → 400 naming the field, nothing changed', async (field, body) => {
    const id = await submitted();
    const response = await update(id, body);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ success: false, error: 'Validation failed', statusCode: 400 });
    expect(Object.keys(response.json().details)).toEqual([field]);
    expect(await resolvedAtOf(id)).toEqual({ status: 'pending', admin_notes: null, resolved_by: null, resolved_at: null });
  });

  it('unknown id → 404; malformed id → 400', async () => {
    const unknown = await update(crypto.randomUUID(), { status: 'resolved' });
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toEqual({ success: false, error: 'Feedback not found', statusCode: 404 });
    const malformed = await update('42', { status: 'resolved' });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json()).toMatchObject({ error: 'Validation failed', details: { id: ['Feedback id must be a UUID'] } });
  });
});

describe('admin routes need an admin', () => {
  const routes = [
    { method: 'GET' as const, url: '/api/feedback/get-feedback' },
    { method: 'GET' as const, url: '/api/get-feedback' },
    { method: 'PUT' as const, url: `/api/feedback/${crypto.randomUUID()}`, payload: { status: 'resolved' } },
  ];

  it('no token, garbage, or a forged legacy token → 401 Authentication required', async () => {
    const forged = await signLegacyAdminToken('not-the-admin-secret-0123456789abcdef', ADMIN_ID);
    for (const route of routes) {
      for (const authorization of [undefined, 'Bearer garbage', `Bearer ${forged}`]) {
        const response = await app.inject({ ...route, headers: authorization ? { authorization } : {} });
        expect(response.statusCode, `${route.method} ${route.url} ${authorization}`).toBe(401);
        expect(response.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
      }
    }
  });

  it('the legacy admin token works', async () => {
    expect((await list('limit=1')).statusCode).toBe(200);
    expect((await list('limit=1', '/api/get-feedback')).statusCode).toBe(200);
  });
});
