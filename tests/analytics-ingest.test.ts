import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp, buildTestAppWithLog } from './support/app.ts';
import { createWebsite, type TestWebsite } from './support/analytics.ts';
import { openTransaction, testSql } from './support/db.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// POST /api/analytics (issue 5): public, validated, answered only after the
// event is committed (group commit), bots dropped, no IP stored.

const sql = testSql();
afterAll(() => sql.end());

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';
const IPHONE = 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1';
const IPAD = 'Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1';
const GOOGLEBOT = 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)';

const event = (websiteId: string, overrides: Record<string, unknown> = {}) => ({
  websiteId,
  eventType: 'page_view',
  page: '/home',
  userAgent: CHROME,
  sessionId: `session-${randomUUID()}`,
  ...overrides,
});

const LOAD_TIME_MESSAGE = 'loadTime must be a number of milliseconds from 0 to 3600000';

async function storedIds(ids: string[]): Promise<Set<string>> {
  const rows = await sql`select id from public.analytics_events where id = any(${ids}::uuid[])`;
  return new Set(rows.map((row) => row.id));
}

describe('recording events', () => {
  let app: FastifyInstance;
  let site: TestWebsite;
  beforeAll(async () => {
    app = await buildTestApp();
    site = await createWebsite(app, 'Ingest site');
  });
  afterAll(async () => app?.close());

  const post = (payload: unknown, remoteAddress = '198.51.100.7') =>
    app.inject({ method: 'POST', url: '/api/analytics', payload: payload as object, remoteAddress });

  it('201 with {id, timestamp}, after the row is committed; derived fields stored, the IP not', async () => {
    const response = await post(
      event(site.id, { referrer: 'https://www.Google.com/search?q=x', metadata: { loadTime: 812, screen: '390x844' }, userAgent: IPHONE }),
      '203.0.113.99',
    );
    expect(response.statusCode).toBe(201);
    const body = response.json();
    expect(body).toEqual({ success: true, message: 'Event recorded', data: { id: expect.any(String), timestamp: expect.any(String) } });
    expect(new Date(body.data.timestamp).toISOString()).toBe(body.data.timestamp);

    const [row] = await sql`select * from public.analytics_events where id = ${body.data.id}`;
    expect(row).toMatchObject({
      website_id: site.id,
      event_type: 'page_view',
      page: '/home',
      // Origin and path only (the query is the visitor's search).
      referrer: 'https://www.google.com/search',
      referrer_host: 'google.com',
      device_type: 'mobile',
      user_id: null,
      metadata: { loadTime: 812, screen: '390x844' },
    });
    expect(row.created_at.toISOString()).toBe(body.data.timestamp);
    expect(row.visitor_id).toMatch(/^[A-Za-z0-9_-]{22}$/);
    expect(JSON.stringify(row)).not.toContain('203.0.113.99');
  });

  it('the referrer is stored as its origin and path: no userinfo, query or fragment; its host as before', async () => {
    const stored = async (referrer: string) => {
      const response = await post(event(site.id, { referrer }));
      expect(response.statusCode, response.body).toBe(201);
      const [row] = await sql`select referrer, referrer_host from public.analytics_events where id = ${response.json().data.id}`;
      return row;
    };
    expect(await stored('https://mail.example/inbox/?to=jane.doe%40example.com#message-7')).toEqual({
      referrer: 'https://mail.example/inbox/',
      referrer_host: 'mail.example',
    });
    expect(await stored('https://jane:secret@WWW.Forum.example:8443/t/42?session=abc')).toEqual({
      referrer: 'https://www.forum.example:8443/t/42',
      referrer_host: 'forum.example',
    });
    expect(await stored('android-app://com.google.android.gm/')).toEqual({ referrer: 'android-app://com.google.android.gm/', referrer_host: 'com.google.android.gm' });
    // No host to keep: nothing stored, as referrer_host has none.
    expect(await stored('mailto:jane.doe@example.com')).toEqual({ referrer: null, referrer_host: null });
    expect(await stored('not a url, jane.doe@example.com')).toEqual({ referrer: null, referrer_host: null });
    // A path the parser percent-encodes is stored decoded where it is UTF-8 (canonicalPath, as a page is).
    const decoded = await stored(`https://x.example/${'‹'.repeat(2000)}`);
    expect(decoded.referrer).toBe(`https://x.example/${'‹'.repeat(2000)}`);
    // One that stays encoded (control characters; the parser strips those at the end) past the column's 2048 characters is cut, not refused.
    const long = await stored(`https://x.example/${'\u0001'.repeat(2000)}x`);
    expect(long.referrer).toHaveLength(2048);
    expect(long.referrer.startsWith('https://x.example/%01%01')).toBe(true);
  });

  it('an optional field sent as null (referrer, userId, metadata) is not given, as front ends send `document.referrer || null`', async () => {
    // Before: 400 `Referrer must be a string`, and the visit was lost.
    const response = await post(event(site.id, { referrer: null, userId: null, metadata: null }), '203.0.113.98');
    expect(response.statusCode).toBe(201);
    const [row] = await sql`select referrer, referrer_host, user_id, metadata from public.analytics_events where id = ${response.json().data.id}`;
    expect(row).toEqual({ referrer: null, referrer_host: null, user_id: null, metadata: {} });
  });

  it('a sendBeacon event from another origin (text/plain JSON) is stored, with no CORS exception', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/api/analytics',
      headers: { 'content-type': 'text/plain;charset=UTF-8', origin: 'https://tracked-site.example' },
      payload: JSON.stringify(event(site.id, { page: '/beacon' })),
    });
    expect(response.statusCode).toBe(201);
    expect(response.headers['access-control-allow-origin']).toBeUndefined();
    const [row] = await sql`select page from public.analytics_events where id = ${response.json().data.id}`;
    expect(row.page).toBe('/beacon');
    const nul = await app.inject({
      method: 'POST',
      url: '/api/analytics',
      headers: { 'content-type': 'text/plain' },
      payload: JSON.stringify(event(site.id, { page: '/a\u0000b' })),
    });
    expect(nul.statusCode).toBe(400);
    // Other routes do not read text/plain as JSON: 415, as for any type that is not JSON.
    const feedback = await app.inject({
      method: 'POST',
      url: '/api/feedback',
      headers: { 'content-type': 'text/plain' },
      payload: JSON.stringify({ name: 'Beacon', email: 'b@example.test', comment: 'long enough comment', rating: 5 }),
    });
    expect(feedback.statusCode).toBe(415);
    expect(feedback.json().error).toBe('Unsupported content type; send JSON with Content-Type: application/json');
  });

  it('device types: desktop, mobile, tablet', async () => {
    const devices: Record<string, string> = {};
    for (const [label, userAgent] of [['chrome', CHROME], ['iphone', IPHONE], ['ipad', IPAD]]) {
      const response = await post(event(site.id, { userAgent }));
      const [row] = await sql`select device_type from public.analytics_events where id = ${response.json().data.id}`;
      devices[label] = row.device_type;
    }
    expect(devices).toEqual({ chrome: 'desktop', iphone: 'mobile', ipad: 'tablet' });
  });

  it("a Mac's user agent with touchScreen (Safari on an iPad) is a tablet, in the row and in the summary's devices", async () => {
    // Safari on iPadOS 13+ sends this, the Mac's user agent word for word.
    const ipadSafari = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15';
    const android = 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36';
    const pads = await createWebsite(app, 'Pads');
    const devices: Record<string, string> = {};
    for (const [label, overrides] of [
      ['ipad', { userAgent: ipadSafari, touchScreen: true }],
      ['mac', { userAgent: ipadSafari }],
      ['mac, touchScreen false', { userAgent: ipadSafari, touchScreen: false }],
      ['android phone with touch', { userAgent: android, touchScreen: true }],
      ['windows touch laptop', { userAgent: CHROME, touchScreen: true }],
    ] as const) {
      const response = await post(event(pads.id, overrides));
      expect(response.statusCode, label).toBe(201);
      const [row] = await sql`select device_type, metadata from public.analytics_events where id = ${response.json().data.id}`;
      devices[label] = row.device_type;
      // A hint for the device type, not stored as such.
      expect(row.metadata, label).toEqual({});
    }
    expect(devices).toEqual({
      ipad: 'tablet',
      mac: 'desktop',
      'mac, touchScreen false': 'desktop',
      'android phone with touch': 'mobile',
      'windows touch laptop': 'desktop',
    });
    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${pads.id}`, headers: { 'x-api-key': pads.apiKey } });
    expect(summary.statusCode).toBe(200);
    expect(summary.json().data.devices).toEqual([
      { type: 'desktop', count: 3 },
      { type: 'mobile', count: 1 },
      { type: 'tablet', count: 1 },
    ]);
    const wrong = await post(event(pads.id, { userAgent: ipadSafari, touchScreen: 'yes' }));
    expect(wrong.statusCode).toBe(400);
    expect(wrong.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { touchScreen: ['Touch screen must be true or false'] } });
    expect((await post(event(pads.id, { userAgent: ipadSafari, touchScreen: null }))).statusCode).toBe(201);
  });

  it('visitor id: userId when given, else the same hash for the same IP and user agent, another for another IP', async () => {
    const ids = [
      (await post(event(site.id), '192.0.2.1')).json().data.id,
      (await post(event(site.id), '192.0.2.1')).json().data.id,
      (await post(event(site.id), '192.0.2.2')).json().data.id,
      (await post(event(site.id, { userId: 'member-7' }), '192.0.2.1')).json().data.id,
    ];
    const rows = await sql`select id, visitor_id, user_id from public.analytics_events where id = any(${ids}::uuid[])`;
    const visitor = (id: string) => rows.find((row) => row.id === id)?.visitor_id;
    expect(visitor(ids[0])).toBe(visitor(ids[1]));
    expect(visitor(ids[2])).not.toBe(visitor(ids[0]));
    expect(visitor(ids[3])).toBe('member-7');
  });

  it("a website id in capitals is the same website: one visitor, one session, in one batch's rollups", async () => {
    const own = await createWebsite(app, 'Capitals');
    const sessionId = `caps-${randomUUID()}`;
    const answers = await Promise.all([post(event(own.id, { sessionId })), post(event(own.id.toUpperCase(), { sessionId }))]);
    expect(answers.map((answer) => answer.statusCode)).toEqual([201, 201]);
    const rows = await sql`select distinct visitor_id from public.analytics_events where website_id = ${own.id}`;
    expect(rows).toHaveLength(1);
    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${own.id}`, headers: { 'x-api-key': own.apiKey } });
    expect(summary.json().data).toMatchObject({ pageViews: 2, uniqueVisitors: 1 });
  });

  it('a known bot → 202 with a message saying so, and nothing stored', async () => {
    const sessionId = `bot-${randomUUID()}`;
    const response = await post(event(site.id, { userAgent: GOOGLEBOT, sessionId }));
    expect(response.statusCode).toBe(202);
    expect(response.json()).toEqual({ success: true, message: 'Not recorded: the user agent is a known bot' });
    expect(await sql`select 1 from public.analytics_events where session_id = ${sessionId}`).toHaveLength(0);
  });

  it('an unknown website (a UUID or not) → 404 Website not found', async () => {
    for (const websiteId of [randomUUID(), 'not-a-uuid']) {
      const response = await post(event(websiteId));
      expect(response.statusCode).toBe(404);
      expect(response.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
    }
  });

  it.each([
    ['websiteId missing', { websiteId: undefined }, 'websiteId', 'Website id is required'],
    ['eventType unknown', { eventType: 'scroll' }, 'eventType', 'Event type must be one of: page_view, click, form_submit, custom'],
    ['page missing', { page: undefined }, 'page', 'Page is required'],
    ['page empty', { page: '' }, 'page', 'Page is required'],
    ['page too long', { page: '/' + 'a'.repeat(2048) }, 'page', 'Page must be at most 2048 bytes as UTF-8'],
    // 684 characters, 2,050 bytes.
    ['page too long in bytes', { page: '/' + '页'.repeat(683) }, 'page', 'Page must be at most 2048 bytes as UTF-8'],
    ['userAgent missing', { userAgent: undefined }, 'userAgent', 'User agent is required'],
    ['sessionId a number', { sessionId: 42 }, 'sessionId', 'Session id must be a string'],
    ['sessionId too long', { sessionId: 's'.repeat(129) }, 'sessionId', 'Session id must be at most 128 characters'],
    ['referrer too long', { referrer: 'https://x.test/' + 'r'.repeat(2048) }, 'referrer', 'Referrer must be at most 2048 characters'],
    // NUL and unpaired surrogates are refused by the body parser before this schema; either way, on the field.
    ['page with a NUL', { page: '/a\u0000b' }, 'page', null],
    ['sessionId with an unpaired surrogate', { sessionId: 's\ud800' }, 'sessionId', null],
    ['metadata an array', { metadata: [1, 2] }, 'metadata', 'Metadata must be a JSON object'],
    ['metadata a string', { metadata: 'x' }, 'metadata', 'Metadata must be a JSON object'],
    ['metadata too big', { metadata: { blob: 'x'.repeat(4100) } }, 'metadata', 'Metadata must be at most 4096 bytes as JSON'],
    // As docs/analytics.md says: its own keys (not those of nested objects) are at most 100 characters.
    ['a metadata key over 100 characters', { metadata: { ['k'.repeat(101)]: 1 } }, 'metadata', 'Metadata keys must be at most 100 characters'],
    ['metadata with a NUL', { metadata: { note: 'a\u0000' } }, 'metadata', null],
    ['metadata with an unpaired surrogate', { metadata: { note: 'a\udc00' } }, 'metadata', null],
    ['metadata.loadTime huge', { metadata: { loadTime: 1e307 } }, 'metadata', LOAD_TIME_MESSAGE],
    ['metadata.loadTime negative', { metadata: { loadTime: -1 } }, 'metadata', LOAD_TIME_MESSAGE],
    ['metadata.loadTime over an hour', { metadata: { loadTime: 3_600_001 } }, 'metadata', LOAD_TIME_MESSAGE],
  ])('%s → 400 Validation failed', async (_label, overrides, field, message) => {
    const response = await post(event(site.id, overrides));
    expect(response.statusCode).toBe(400);
    const body = response.json();
    expect(body).toMatchObject({ success: false, error: 'Validation failed', statusCode: 400 });
    if (message === null) expect(body.details[field]).toHaveLength(1);
    else expect(body.details[field], JSON.stringify(body.details)).toContain(message);
  });

  it('a page of 2,047 bytes of CJK text is stored and counted among the top pages', async () => {
    const own = await createWebsite(app, 'Long pages');
    const page = '/' + '页'.repeat(682);
    const response = await post(event(own.id, { page }));
    expect(response.statusCode, response.body).toBe(201);
    expect(await sql`select views::int from public.analytics_daily_pages where website_id = ${own.id} and page = ${page}`).toEqual([{ views: 1 }]);
  });

  it('loadTime from 0 to an hour is counted in avgLoadTime; one beyond is refused and leaves the metric as it was', async () => {
    const own = await createWebsite(app, 'Load times');
    const send = (metadata: Record<string, unknown>) => post(event(own.id, { metadata }));
    expect((await send({ loadTime: 0 })).statusCode).toBe(201);
    expect((await send({ loadTime: 3_600_000 })).statusCode).toBe(201);
    expect((await send({ loadTime: 200 })).statusCode).toBe(201);
    // Not a number: stored with the event, left out of the metric, as before.
    expect((await send({ loadTime: 'slow' })).statusCode).toBe(201);
    // 1e999 parses as Infinity.
    const infinite = await app.inject({
      method: 'POST',
      url: '/api/analytics',
      headers: { 'content-type': 'application/json' },
      payload: JSON.stringify(event(own.id)).replace(/}$/, ',"metadata":{"loadTime":1e999}}'),
    });
    expect(infinite.statusCode).toBe(400);
    // Any number too large to store is refused by the metadata's own check, before loadTime's.
    expect(infinite.json().details).toEqual({ metadata: ['Metadata must not contain numbers too large to store (such as 1e400)'] });
    for (const loadTime of [1e307, -1e6, 3_600_001]) expect((await send({ loadTime })).statusCode).toBe(400);

    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${own.id}`, headers: { 'x-api-key': own.apiKey } });
    expect(summary.json().data).toMatchObject({ pageViews: 4, avgLoadTime: 1_200_066.67 });
  });

  it('metadata nested thousands of levels deep (10 KB of brackets) → 400 naming the field, not a 500; 32 levels are fine', async () => {
    const nested = (levels: number) => `${'['.repeat(levels)}${']'.repeat(levels)}`;
    const send = (metadata: string) =>
      app.inject({
        method: 'POST',
        url: '/api/analytics',
        headers: { 'content-type': 'application/json' },
        payload: JSON.stringify(event(site.id)).replace(/}$/, `,"metadata":{"a":${metadata}}}`),
      });
    const deep = await send(nested(5_000));
    expect(deep.statusCode).toBe(400);
    expect(deep.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { metadata: ['Must be nested at most 32 levels deep'] } });
    // The body is level 1 and metadata level 2, so n arrays reach level n + 2: 30 fit in 32, 31 do not.
    expect((await send(nested(30))).statusCode).toBe(201);
    expect((await send(nested(31))).statusCode).toBe(400);
  });

  it('a body over 16 KiB → 413; malformed JSON → 400', async () => {
    const big = await post(event(site.id, { page: '/' + 'a'.repeat(20_000) }));
    expect(big.statusCode).toBe(413);
    const malformed = await app.inject({ method: 'POST', url: '/api/analytics', payload: '{"websiteId":', headers: { 'content-type': 'application/json' } });
    expect(malformed.statusCode).toBe(400);
  });

  it('every 201 under 500 concurrent requests is a committed row (group commit)', async () => {
    const responses = await Promise.all(
      Array.from({ length: 500 }, (_, index) => post(event(site.id, { page: `/load/${index % 20}` }), `10.0.${index % 7}.${index % 200}`)),
    );
    const acknowledged = responses.filter((response) => response.statusCode === 201).map((response) => response.json().data.id);
    expect(acknowledged).toHaveLength(500);
    expect(new Set(acknowledged).size).toBe(500);
    expect((await storedIds(acknowledged)).size).toBe(500);
  });
});

describe('group commit: batches and their failures', () => {
  it('a failed batch fails exactly its own requests with 503; the next batch is stored', async () => {
    const app = await buildTestApp({ ANALYTICS_BATCH_MAX_WAIT_MS: '50', ANALYTICS_BATCH_MAX_ROWS: '1000' });
    const site = await createWebsite(app, 'Failing batch');
    // A trigger of this test's own refuses one page, so the batch carrying it fails.
    const poison = `/poison-${randomUUID().slice(0, 8)}`;
    const trigger = `refuse_${randomUUID().slice(0, 8)}`;
    await sql.unsafe(`
      create function public.${trigger}() returns trigger language plpgsql as $$
      begin
        if new.page = '${poison}' then raise exception 'refused by test'; end if;
        return new;
      end $$;
      create trigger ${trigger} before insert on public.analytics_events for each row execute function public.${trigger}();`);
    try {
      const post = (page: string) => app.inject({ method: 'POST', url: '/api/analytics', payload: event(site.id, { page }) });
      const doomed = await Promise.all([post(poison), ...Array.from({ length: 9 }, () => post('/innocent'))]);
      const fine = await Promise.all(Array.from({ length: 10 }, () => post('/later')));

      for (const response of doomed) {
        expect(response.statusCode).toBe(503);
        expect(response.json()).toEqual({
          success: false,
          error: 'Analytics event could not be stored',
          statusCode: 503,
          requestId: expect.any(String),
        });
      }
      expect(fine.map((response) => response.statusCode)).toEqual(Array(10).fill(201));
      const ids = fine.map((response) => response.json().data.id);
      expect((await storedIds(ids)).size).toBe(10);
      const [{ n }] = await sql`select count(*)::int as n from public.analytics_events where website_id = ${site.id} and page = '/innocent'`;
      expect(n).toBe(0);
    } finally {
      await sql.unsafe(`drop trigger ${trigger} on public.analytics_events; drop function public.${trigger}();`);
      await app.close();
    }
  });

  // 54000 is what a value too big for an index key gets (a page of 2,048 CJK
  // characters did, before pages were bounded in bytes): the trigger raises it
  // for one page, as the index would.
  it.each([
    ['a check violation', `alter table public.analytics_events add constraint refuse_me check (page <> '/refuse-me')`],
    [
      'a value too big for an index',
      `create function public.refuse_me() returns trigger language plpgsql as $$
         begin
           if new.page = '/refuse-me' then raise exception 'index row size exceeds btree maximum' using errcode = '54000'; end if;
           return new;
         end $$;
       create trigger refuse_me before insert on public.analytics_events for each row execute function public.refuse_me()`,
    ],
  ])('a row the database refuses (%s) gets 400; the rest of its batch is stored and answered 201', async (_label, refusal) => {
    // A database of this test's own: the change below takes the table's
    // strongest lock, which would stall the other files' work on a shared one.
    const database = await createPrivateDatabase('refused_row');
    const owner = postgres(database.url, { max: 1, onnotice: () => {} });
    const refused = '/refuse-me';
    await owner.unsafe(refusal);
    // A long wait, so the requests share one batch; logged down to `http`, the level of each request's line.
    const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: database.url, ANALYTICS_BATCH_MAX_WAIT_MS: '300', ANALYTICS_BATCH_MAX_ROWS: '1000' }, 'http');
    const logged = () => lines.map((line) => JSON.parse(line) as { level: number; msg: string; requestId?: string; statusCode?: number; eventId?: string });
    /** The refusal's own line and the request's `http` line: one of each, both carrying the request id the answer gave. */
    const expectLinesOf = (answer: { headers: Record<string, unknown> }) => {
      const requestId = answer.headers['x-request-id'];
      expect(requestId).toEqual(expect.any(String));
      const ofRequest = logged().filter((line) => line.requestId === requestId);
      expect(ofRequest.filter((line) => line.msg === 'analytics event refused by the database; its request gets 400')).toEqual([
        expect.objectContaining({ level: 40, websiteId: expect.any(String), eventId: expect.any(String) }),
      ]);
      expect(ofRequest.filter((line) => line.msg === 'request completed')).toEqual([expect.objectContaining({ level: 25, statusCode: 400 })]);
    };
    try {
      const site = await createWebsite(app, 'Refused row');
      const post = (page: string) => app.inject({ method: 'POST', url: '/api/analytics', payload: event(site.id, { page }) });
      const answers = await Promise.all([post('/valid-0'), post(refused), post('/valid-1'), post('/valid-2')]);
      expect(answers.map((answer) => answer.statusCode)).toEqual([201, 400, 201, 201]);
      expect(answers[1].json()).toEqual({ success: false, error: 'Analytics event was refused by the database', statusCode: 400 });
      // Refused in a batch written again row by row, then alone in a batch of its own.
      expectLinesOf(answers[1]);
      const alone = await post(refused);
      expect(alone.statusCode).toBe(400);
      expectLinesOf(alone);
      // No refusal's line without its request's id.
      expect(logged().filter((line) => line.msg.startsWith('analytics event refused') && line.requestId === undefined)).toEqual([]);
      // Acknowledged equals committed: every 201 has its row, the refused page has none.
      const ids = answers.filter((answer) => answer.statusCode === 201).map((answer) => answer.json().data.id);
      const stored = await owner`select id, page from public.analytics_events where website_id = ${site.id} order by page`;
      expect(stored.map((row) => row.id).sort()).toEqual([...ids].sort());
      expect(stored.map((row) => row.page)).toEqual(['/valid-0', '/valid-1', '/valid-2']);
    } finally {
      await app.close();
      await owner.end();
      await database.drop();
    }
  });

  it("two websites of a batch finish deleting while it is written, one during each attempt: a live website's event in it is stored (201), theirs get 404", async () => {
    // A database of this test's own: the test watches for the batch's INSERT
    // waiting on a lock, which another file's could be doing on a shared one.
    const database = await createPrivateDatabase('deleted_mid_batch');
    const owner = postgres(database.url, { max: 4, onnotice: () => {} });
    // A long wait, so the three requests share one batch.
    const app = await buildTestApp({ DATABASE_URL: database.url, ANALYTICS_BATCH_MAX_WAIT_MS: '300', ANALYTICS_BATCH_MAX_ROWS: '1000' });
    let deletions: Awaited<ReturnType<typeof openTransaction<number>>>[] = [];
    try {
      const live = await createWebsite(app, 'Live');
      const leaving = [await createWebsite(app, 'Leaving 1'), await createWebsite(app, 'Leaving 2')];
      // Each website's last step of deletion (delete_website_batch ends by
      // deleting the row), held uncommitted; each transaction's backend pid says which one a lock wait is on.
      deletions = await Promise.all(
        leaving.map((site) =>
          openTransaction(owner, async (tx) => {
            await tx`delete from public.websites where id = ${site.id}`;
            const [{ pid }] = await tx<{ pid: number }[]>`select pg_backend_pid() as pid`;
            return pid;
          }),
        ),
      );
      /** The held deletion the batch's INSERT is waiting on (the foreign key's check of that website's row). */
      const awaitedByInsert = async () => {
        const deadline = Date.now() + 10_000;
        while (Date.now() < deadline) {
          const blockers = await owner<{ pid: number }[]>`
            select unnest(pg_blocking_pids(pid)) as pid from pg_stat_activity
             where datname = current_database() and strpos(query, 'insert into public.analytics_events') > 0`;
          const held = deletions.find((deletion) => blockers.some((blocker) => blocker.pid === deletion.result));
          if (held) return held;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        throw new Error('the batch never waited on a held deletion');
      };
      const post = (websiteId: string) => app.inject({ method: 'POST', url: '/api/analytics', payload: event(websiteId) });
      const answering = Promise.all([post(live.id), ...leaving.map((site) => post(site.id))]);
      // Whichever deletion the first attempt waits on commits (that attempt fails
      // on the foreign key); the next attempt, which skips that website, waits on
      // the other, which commits in turn. One retry in all answered every event 503.
      const first = await awaitedByInsert();
      await first.commit();
      const second = await awaitedByInsert();
      expect(second).not.toBe(first);
      await second.commit();
      const answers = await answering;

      expect(answers.map((answer) => answer.statusCode)).toEqual([201, 404, 404]);
      for (const answer of answers.slice(1)) expect(answer.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
      // Acknowledged equals committed: the live event and its rollup, nothing of the websites gone.
      const stored = await owner`select id, website_id from public.analytics_events`;
      expect(stored).toEqual([{ id: answers[0].json().data.id, website_id: live.id }]);
      const totals = await owner`select website_id, page_views::int from public.analytics_daily_totals`;
      expect(totals).toEqual([{ website_id: live.id, page_views: 1 }]);
    } finally {
      await Promise.all(deletions.map((deletion) => deletion.commit()));
      await app.close();
      await owner.end();
      await database.drop();
    }
  });

  it('closing the app writes what is queued: every 201 id is in the table', async () => {
    // A long wait, so the requests are still queued when the close begins.
    const app = await buildTestApp({ ANALYTICS_BATCH_MAX_WAIT_MS: '5000', ANALYTICS_BATCH_MAX_ROWS: '10000' });
    const site = await createWebsite(app, 'Shutdown flush');
    const pending = Array.from({ length: 200 }, () => app.inject({ method: 'POST', url: '/api/analytics', payload: event(site.id) }));
    await new Promise((resolve) => setTimeout(resolve, 50));
    const started = Date.now();
    await app.close();
    expect(Date.now() - started).toBeLessThan(4000);
    const responses = await Promise.all(pending);
    const acknowledged = responses.filter((response) => response.statusCode === 201).map((response) => response.json().data.id);
    expect(acknowledged).toHaveLength(200);
    expect((await storedIds(acknowledged)).size).toBe(200);
  });

  it('requests still arriving during the close are answered, and none is acknowledged without its row', async () => {
    const app = await buildTestApp({ ANALYTICS_BATCH_MAX_WAIT_MS: '20' });
    const site = await createWebsite(app, 'Shutdown race');
    const pending = Array.from({ length: 300 }, () => app.inject({ method: 'POST', url: '/api/analytics', payload: event(site.id) }));
    const closing = app.close();
    const responses = await Promise.all(pending);
    await closing;
    const acknowledged = responses.filter((response) => response.statusCode === 201).map((response) => response.json().data.id);
    for (const response of responses) expect([201, 503]).toContain(response.statusCode);
    expect(acknowledged.length).toBeGreaterThan(0);
    expect((await storedIds(acknowledged)).size).toBe(acknowledged.length);
  });

  it('a client that hangs up while its event waits for the batch does not hold the close open', async () => {
    // A long batch wait, so the client is gone before its event is written;
    // a shutdown budget far above the bound below, so a close that waited for
    // the lost request would wait out the drain's share of it.
    const app = await buildTestApp({ ANALYTICS_BATCH_MAX_WAIT_MS: '1000', SHUTDOWN_TIMEOUT_MS: '20000' });
    const site = await createWebsite(app, 'Hung up');
    const address = await app.listen({ port: 0, host: '127.0.0.1' });
    const controller = new AbortController();
    const sent = fetch(`${address}/api/analytics`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(event(site.id, { page: '/hung-up' })),
      signal: controller.signal,
    }).catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 200));
    controller.abort();
    expect(await sent).toBeInstanceOf(Error);
    // The event still reaches its batch; then the close finds nothing in flight.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const started = Date.now();
    await app.close();
    expect(Date.now() - started).toBeLessThan(3000);
    const [{ n }] = await sql`select count(*)::int as n from public.analytics_events where website_id = ${site.id} and page = '/hung-up'`;
    expect(n).toBe(1);
  });

  it('ingestion draws on its own rate limit', async () => {
    const app = await buildTestApp({ RATE_LIMIT_INGEST_PER_15MIN: '3' });
    try {
      const site = await createWebsite(app, 'Rate limited');
      const statuses = [];
      for (let i = 0; i < 4; i += 1) {
        statuses.push((await app.inject({ method: 'POST', url: '/api/analytics', payload: event(site.id), remoteAddress: '192.0.2.77' })).statusCode);
      }
      expect(statuses).toEqual([201, 201, 201, 429]);
    } finally {
      await app.close();
    }
  });
});
