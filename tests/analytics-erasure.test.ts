import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { addDays } from '../src/modules/analytics/dates.ts';
import { legacyAdmin, signedInUser } from './support/admin-auth.ts';
import { ANALYTICS_TABLES, createWebsite, type FixtureEvent, insertEvents, type TestWebsite } from './support/analytics.ts';
import { fromRollups, reference } from './support/analytics-reference.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { testSql } from './support/db.ts';

// Erasing one person's analytics on one website (POST
// /api/analytics/websites/:websiteId/erasures; docs/analytics.md, "Erasing
// one person"): the person's events go, their ids leave every analytics
// table, every figure of every range stays, other people's rows stay byte
// for byte, and the old ids count as new when they come back. The person's
// events are those carrying a given id and the rest of their sessions: a
// visitor hash shared with someone else leads to none of that person's.

const sql = testSql();
afterAll(() => sql.end());

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';
const FIREFOX = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';
const IPHONE = 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1';

const FIRST_DAY = '2026-02-02';
const DAYS = 5;
const day = (n: number) => addDays(FIRST_DAY, n);

/** Every range of whole days inside the five, and two around them. */
const RANGES: Array<[string, string]> = [
  ...Array.from({ length: DAYS }, (_, start) => Array.from({ length: DAYS - start }, (_, length) => [day(start), day(start + length)] as [string, string])).flat(),
  ['2026-01-20', '2026-02-28'],
  ['2025-03-01', '2026-02-03'],
];

interface Visit {
  at: string;
  ip: string;
  userAgent: string;
  sessionId: string;
  page: string;
  userId?: string;
  eventType?: 'page_view' | 'click' | 'form_submit' | 'custom';
  referrer?: string;
  loadTime?: number;
}

// P is the person to erase: anonymous in two tabs on the first evening, one
// of them running over midnight (a second visitor hash on the next day),
// signing in there, and back days later on a phone, signed in. Q and R are
// others: Q anonymous over midnight, R signed in; S shares P's address and
// browser, on a day P is not there (another hash), and T P's address with
// another browser on P's first day.
const P_VISITS: Visit[] = [
  { at: `${day(0)}T23:40:00Z`, ip: '81.2.69.160', userAgent: CHROME, sessionId: 'p-tab-1', page: '/?utm_source=news&utm_medium=email&utm_campaign=spring', referrer: 'https://www.google.com/search', loadTime: 420 },
  { at: `${day(0)}T23:45:00Z`, ip: '81.2.69.160', userAgent: CHROME, sessionId: 'p-tab-2', page: '/blog' },
  { at: `${day(1)}T00:05:00Z`, ip: '81.2.69.160', userAgent: CHROME, sessionId: 'p-tab-1', page: '/pricing' },
  { at: `${day(1)}T00:10:00Z`, ip: '81.2.69.160', userAgent: CHROME, sessionId: 'p-tab-1', page: '/account', userId: 'user-p', eventType: 'custom' },
  { at: `${day(3)}T09:00:00Z`, ip: '2.16.0.1', userAgent: IPHONE, sessionId: 'p-phone', page: '/', userId: 'user-p', loadTime: 900 },
  { at: `${day(3)}T09:02:00Z`, ip: '2.16.0.1', userAgent: IPHONE, sessionId: 'p-phone', page: '/pricing', userId: 'user-p', eventType: 'click' },
];
const OTHER_VISITS: Visit[] = [
  { at: `${day(0)}T23:50:00Z`, ip: '8.8.8.8', userAgent: FIREFOX, sessionId: 'q-tab', page: '/', referrer: 'https://news.ycombinator.com/' },
  { at: `${day(1)}T00:02:00Z`, ip: '8.8.8.8', userAgent: FIREFOX, sessionId: 'q-tab', page: '/blog' },
  { at: `${day(2)}T10:00:00Z`, ip: '8.8.8.8', userAgent: FIREFOX, sessionId: 'q-2', page: '/pricing', loadTime: 300 },
  { at: `${day(1)}T12:00:00Z`, ip: '1.1.1.1', userAgent: CHROME, sessionId: 'r-1', page: '/?utm_source=news&utm_medium=email&utm_campaign=spring', userId: 'user-r' },
  { at: `${day(2)}T23:59:00Z`, ip: '1.1.1.1', userAgent: CHROME, sessionId: 'r-2', page: '/docs', userId: 'user-r' },
  { at: `${day(3)}T00:01:00Z`, ip: '1.1.1.1', userAgent: CHROME, sessionId: 'r-2', page: '/docs/api', userId: 'user-r', eventType: 'form_submit' },
  { at: `${day(4)}T08:00:00Z`, ip: '1.1.1.1', userAgent: IPHONE, sessionId: 'r-3', page: '/', userId: 'user-r' },
  { at: `${day(2)}T15:00:00Z`, ip: '81.2.69.160', userAgent: CHROME, sessionId: 's-1', page: '/blog', referrer: 'https://www.google.com/' },
  { at: `${day(0)}T20:00:00Z`, ip: '81.2.69.160', userAgent: FIREFOX, sessionId: 't-1', page: '/' },
];

/** The database's text of each analytics table's rows of `websiteId`, sorted: what a test compares. */
async function tableRows(websiteId: string): Promise<Record<string, string[]>> {
  const rows: Record<string, string[]> = {};
  for (const table of ANALYTICS_TABLES) {
    const found = await sql<{ row: string }[]>`select to_jsonb(t)::text as row from ${sql(`public.${table}`)} t where website_id = ${websiteId} order by 1`;
    rows[table] = found.map(({ row }) => row);
  }
  return rows;
}

/** Each analytics table's columns of text (and JSON) in which `ids` are looked for. */
async function searchedColumns(): Promise<Array<{ table: string; column: string }>> {
  return sql<{ table: string; column: string }[]>`
    select table_name as table, column_name as column from information_schema.columns
     where table_schema = 'public' and table_name = any (${ANALYTICS_TABLES}) and data_type in ('text', 'jsonb', 'character varying')
     order by 1, 2`;
}

/** Rows of `websiteId` holding any of `ids` anywhere in a text or JSON column (as a substring). */
async function rowsHolding(websiteId: string, ids: string[]): Promise<Array<{ table: string; column: string; rows: number }>> {
  const found = [];
  for (const { table, column } of await searchedColumns()) {
    const [{ rows }] = await sql<{ rows: number }[]>`
      select count(*)::int as rows from ${sql(`public.${table}`)} t
       where website_id = ${websiteId} and exists (select 1 from unnest(${ids}::text[]) id where strpos(t.${sql(column)}::text, id) > 0)`;
    if (rows > 0) found.push({ table, column, rows });
  }
  return found;
}

describe('erasing one person from a website', () => {
  let app: FastifyInstance;
  let lines: string[];
  let site: TestWebsite;
  let other: TestWebsite;
  let admin: { authorization: string };
  let editor: { authorization: string };
  let viewer: { authorization: string };
  let noRole: { authorization: string };
  /** P's ids as stored: user id, both visitor hashes, three sessions. */
  let personIds: string[];

  const erase = (websiteId: string, payload: unknown, headers: Record<string, string>) =>
    app.inject({ method: 'POST', url: `/api/analytics/websites/${websiteId}/erasures`, headers, payload: payload as object });

  /** Sends `visits` to `/api/analytics` as a browser would, each at its own time (the server stamps events with its clock). */
  async function ingest(websiteId: string, visits: Visit[]) {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      for (const visit of visits) {
        vi.setSystemTime(new Date(visit.at));
        const response = await app.inject({
          method: 'POST',
          url: '/api/analytics',
          remoteAddress: visit.ip,
          payload: {
            websiteId,
            eventType: visit.eventType ?? 'page_view',
            page: visit.page,
            userAgent: visit.userAgent,
            sessionId: visit.sessionId,
            ...(visit.userId ? { userId: visit.userId } : {}),
            ...(visit.referrer ? { referrer: visit.referrer } : {}),
            ...(visit.loadTime ? { metadata: { loadTime: visit.loadTime } } : {}),
          },
        });
        expect(response.statusCode, response.body).toBe(201);
      }
    } finally {
      vi.useRealTimers();
    }
  }

  /** Every analytics read the API offers, for every range: summaries (both routes), the daily series, its CSV, the live count. */
  async function everyFigure(websiteId: string) {
    const headers = admin;
    const figures: Record<string, unknown> = {};
    for (const [startDate, endDate] of RANGES) {
      const query = `startDate=${startDate}&endDate=${endDate}`;
      const [summary, byPath, series, csv] = await Promise.all([
        app.inject({ method: 'GET', url: `/api/analytics?websiteId=${websiteId}&${query}`, headers }),
        app.inject({ method: 'GET', url: `/api/analytics/website/${websiteId}?${query}`, headers }),
        app.inject({ method: 'GET', url: `/api/analytics/date-range?websiteId=${websiteId}&${query}`, headers }),
        app.inject({ method: 'GET', url: `/api/analytics/date-range/export?websiteId=${websiteId}&${query}`, headers }),
      ]);
      for (const response of [summary, byPath, series, csv]) expect(response.statusCode, response.body).toBe(200);
      figures[`${startDate}..${endDate}`] = { summary: summary.json(), byPath: byPath.json(), series: series.json(), csv: csv.body };
    }
    const live = await app.inject({ method: 'GET', url: `/api/analytics/realtime?websiteId=${websiteId}`, headers });
    expect(live.statusCode).toBe(200);
    figures.live = live.json().data.activeVisitors;
    return figures;
  }

  beforeAll(async () => {
    ({ app, lines } = await buildTestAppWithLog());
    admin = await legacyAdmin();
    [editor, viewer, noRole] = await Promise.all([signedInUser(sql, ['editor']), signedInUser(sql, ['viewer']), signedInUser(sql)]);
    [site, other] = [await createWebsite(app, 'Erasure site'), await createWebsite(app, 'Erasure bystander')];
    await ingest(site.id, [...P_VISITS, ...OTHER_VISITS].sort((a, b) => a.at.localeCompare(b.at)));
    // The same person's user id on another website: that website's analytics are not this erasure's.
    await ingest(other.id, [P_VISITS[4]]);
    const stored = await sql<{ id: string }[]>`
      select distinct unnest(array[visitor_id, session_id, user_id]) as id from public.analytics_events
       where website_id = ${site.id} and session_id like 'p-%'`;
    personIds = stored.map(({ id }) => id).filter((id) => id !== null);
  });
  afterAll(async () => app?.close());

  it("finds P's ids as the fixture meant: one user id, two visitor hashes, three sessions", () => {
    expect(personIds).toHaveLength(6);
    expect(personIds).toEqual(expect.arrayContaining(['user-p', 'p-tab-1', 'p-tab-2', 'p-phone']));
  });

  it('refuses callers who do not manage websites, as the website routes do, and erases nothing for them', async () => {
    const before = await tableRows(site.id);
    const body = { userId: 'user-p' };
    expect((await erase(site.id, body, {})).statusCode).toBe(401);
    // The website's API key reads its analytics; it erases nothing.
    expect((await erase(site.id, body, { 'x-api-key': site.apiKey })).statusCode).toBe(401);
    for (const caller of [viewer, noRole]) {
      const response = await erase(site.id, body, caller);
      expect(response.statusCode).toBe(403);
      expect(response.json()).toMatchObject({ success: false, statusCode: 403 });
    }
    const unknown = await erase(randomUUID(), body, admin);
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toMatchObject({ success: false, error: 'Website not found' });
    expect(await tableRows(site.id)).toEqual(before);
  });

  it('answers bad bodies 400 in the envelope, naming the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{}, 'body'],
      [{ userId: '' }, 'userId'],
      [{ visitorId: 'v'.repeat(129) }, 'visitorId'],
      [{ sessionId: 42 }, 'sessionId'],
      [{ userId: 'a\u0000b' }, 'userId'],
      [{ userId: null }, 'userId'],
      [{ userId: 'user-p', dryRun: 'true' }, 'dryRun'],
      [{ dryRun: true }, 'body'],
    ];
    for (const [payload, field] of cases) {
      const response = await erase(site.id, payload, admin);
      expect(response.statusCode, JSON.stringify(payload)).toBe(400);
      expect(response.json()).toMatchObject({ success: false, error: 'Validation failed', details: { [field]: expect.any(Array) } });
    }
    const badId = await erase('not-a-uuid', { userId: 'user-p' }, admin);
    expect(badId.statusCode).toBe(400);
    expect(badId.json().details).toHaveProperty('websiteId');
    const noBody = await app.inject({ method: 'POST', url: `/api/analytics/websites/${site.id}/erasures`, headers: admin });
    expect(noBody.statusCode).toBe(400);
  });

  it('erases P: figures of every range unchanged, no id of P left, everyone else untouched; twice is once', async () => {
    const figuresBefore = await everyFigure(site.id);
    const rowsBefore = await tableRows(site.id);
    const otherBefore = await tableRows(other.id);
    expect((await rowsHolding(site.id, personIds)).length).toBeGreaterThan(0);

    // P's user id reaches p-tab-1 (signed in there) and p-phone; p-tab-2 shares only the first evening's hash with
    // p-tab-1, which is not followed (a hash may be someone else's too): P names that tab by its session id.
    const person = { userId: 'user-p', sessionId: 'p-tab-2' };
    const userIdAlone = await erase(site.id, { userId: 'user-p', dryRun: true }, admin);
    expect(userIdAlone.json()).toMatchObject({ message: 'Dry run: nothing erased', data: { events: 5, visitors: 3, sessions: 2 } });
    const dryRun = await erase(site.id, { ...person, dryRun: true }, editor);
    expect(dryRun.statusCode, dryRun.body).toBe(200);
    expect(dryRun.json()).toMatchObject({ success: true, message: 'Dry run: nothing erased' });
    expect(await tableRows(site.id)).toEqual(rowsBefore);

    const response = await erase(site.id, person, admin);
    expect(response.statusCode, response.body).toBe(200);
    // Six events; user-p and two hashes; three sessions; the dry run said as much.
    expect(response.json()).toMatchObject({ success: true, message: 'Analytics erased', data: { events: 6, visitors: 3, sessions: 3 } });
    expect(response.json().data.memberRows).toBeGreaterThan(0);
    expect(response.json().data).toEqual(dryRun.json().data);

    // (a) Every figure of every range, the live count too.
    expect(await everyFigure(site.id)).toEqual(figuresBefore);
    // (b) Nowhere in any analytics table's text.
    expect(await rowsHolding(site.id, personIds)).toEqual([]);
    // (c) Every row that held none of P's ids is still there as it was; only events went; the totals did not move.
    const rowsAfter = await tableRows(site.id);
    for (const table of ANALYTICS_TABLES) {
      const others = rowsBefore[table].filter((row) => !personIds.some((id) => row.includes(id)));
      expect(rowsAfter[table], table).toEqual(expect.arrayContaining(others));
      expect(rowsAfter[table].length, table).toBe(table === 'analytics_events' ? rowsBefore[table].length - 6 : rowsBefore[table].length);
    }
    expect(await tableRows(other.id)).toEqual(otherBefore);

    // Erasing again, or someone never seen, is success with nothing to do.
    for (const body of [person, { userId: 'user-p', dryRun: true }, { visitorId: 'never-seen' }, { sessionId: 'p-tab-1' }]) {
      const again = await erase(site.id, body, editor);
      expect(again.statusCode).toBe(200);
      expect(again.json()).toEqual({ success: true, message: 'Nothing to erase', data: { events: 0, visitors: 0, sessions: 0, memberRows: 0 } });
    }
    expect(await tableRows(site.id)).toEqual(rowsAfter);

    // The log says who, which website and how much, and none of P's ids.
    const said = lines.filter((line) => line.includes('analytics of one person erased')).map((line) => JSON.parse(line));
    expect(said[0]).toMatchObject({ websiteId: site.id, erasedBy: expect.stringMatching(/^legacy-admin:/), events: 6, visitors: 3, sessions: 3 });
    expect(lines.filter((line) => personIds.some((id) => line.includes(id)))).toEqual([]);
  });

  it('is in the OpenAPI document: Bearer only, the body naming at least one id', async () => {
    const document = (await app.inject('/docs/json')).json();
    const operation = document.paths['/api/analytics/websites/{websiteId}/erasures'].post;
    expect(operation.security).toEqual([{ bearer: [] }]);
    expect(operation.summary).toContain('editor or admin');
    const body = operation.requestBody.content['application/json'].schema;
    expect(body.anyOf.map((branch: { required: string[] }) => branch.required)).toEqual([['userId'], ['visitorId'], ['sessionId']]);
    expect(body.properties.dryRun).toMatchObject({ type: 'boolean' });
    // The route's own error statuses (ROUTE_ERRORS in src/plugins/openapi-responses.ts: body, Bearer, 404, rate limit,
    // database unavailable), then the envelope for any other.
    expect(Object.keys(operation.responses)).toEqual(['200', '400', '401', '403', '404', '413', '415', '429', '503', '4XX', '5XX']);
  });

  it("(d) counts P's old ids as new when they come back", async () => {
    const beforeRange = (await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}&startDate=${day(3)}&endDate=${day(4)}`, headers: admin })).json().data;
    await ingest(site.id, [{ at: `${day(4)}T12:00:00Z`, ip: '2.16.0.1', userAgent: IPHONE, sessionId: 'p-phone', page: '/pricing', userId: 'user-p', eventType: 'click' }]);
    const after = (await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}&startDate=${day(3)}&endDate=${day(4)}`, headers: admin })).json().data;
    // Unerased, user-p and p-phone (seen on day 3) would be counted once in the range; now they are new members.
    expect(after.uniqueVisitors).toBe(beforeRange.uniqueVisitors + 1);
    expect(after.sessions).toBe(beforeRange.sessions + 1);
    const rows = await sql`select prev_day::text from public.analytics_distinct_days where website_id = ${site.id} and kind = 'visitor' and member = 'user-p'`;
    expect(rows).toEqual([{ prev_day: '-infinity' }]);
  });

  it("erases P's tab and nothing of B, who shared P's visitor hash one evening; the dry run said as much", async () => {
    const shared = await createWebsite(app, 'Erasure shared hash');
    await insertEvents(sql, shared.id, [
      // P: one anonymous tab on day 0, under the hash of an address and browser B shares (an office, a mobile network).
      { page: '/', session: 'p-shared-tab', visitor: 'hash-evening', device: 'desktop', at: `${day(0)}T18:00:00Z` },
      { page: '/blog', session: 'p-shared-tab', visitor: 'hash-evening', device: 'desktop', at: `${day(0)}T18:10:00Z` },
      // B: another tab that evening, the same hash; B signs in there.
      { page: '/', session: 'b-tab', visitor: 'hash-evening', device: 'desktop', at: `${day(0)}T19:00:00Z` },
      { page: '/account', session: 'b-tab', visitor: 'user-b', device: 'desktop', at: `${day(0)}T19:05:00Z` },
      // B later, signed in, on a phone, on other days: nothing shared with P.
      { page: '/a', session: 'b-phone-1', visitor: 'user-b', device: 'mobile', at: `${day(3)}T09:00:00Z` },
      { page: '/b', session: 'b-phone-2', visitor: 'user-b', device: 'mobile', at: `${day(4)}T09:00:00Z` },
      // C: unrelated.
      { page: '/c', session: 'c-tab', visitor: 'hash-c', device: 'desktop', at: `${day(3)}T09:30:00Z` },
    ]);
    const figuresBefore = await everyFigure(shared.id);
    const rowsBefore = await tableRows(shared.id);

    const dryRun = await erase(shared.id, { sessionId: 'p-shared-tab', dryRun: true }, admin);
    expect(dryRun.statusCode, dryRun.body).toBe(200);
    expect(dryRun.json()).toMatchObject({ success: true, message: 'Dry run: nothing erased', data: { events: 2, visitors: 1, sessions: 1 } });
    expect(await tableRows(shared.id)).toEqual(rowsBefore);

    const response = await erase(shared.id, { sessionId: 'p-shared-tab' }, admin);
    expect(response.statusCode, response.body).toBe(200);
    expect(response.json()).toMatchObject({ message: 'Analytics erased', data: dryRun.json().data });

    // Every event of B (that evening's tab, both phone sessions) and of C is there as it was; only P's tab went.
    const rowsAfter = await tableRows(shared.id);
    expect(rowsAfter.analytics_events).toEqual(rowsBefore.analytics_events.filter((row) => !row.includes('"p-shared-tab"')));
    expect(rowsAfter.analytics_events).toHaveLength(5);
    // B's own sessions and user id keep their rollup rows, under their names; the shared hash's rows are renamed, none deleted.
    for (const table of ANALYTICS_TABLES.filter((name) => name !== 'analytics_events')) {
      const untouched = rowsBefore[table].filter((row) => !row.includes('"p-shared-tab"') && !row.includes('"hash-evening"'));
      expect(rowsAfter[table], table).toEqual(expect.arrayContaining(untouched));
      expect(rowsAfter[table].length, table).toBe(rowsBefore[table].length);
    }
    for (const session of ['b-tab', 'b-phone-1', 'b-phone-2']) expect(rowsAfter.analytics_session_days.join()).toContain(`"${session}"`);
    expect(await rowsHolding(shared.id, ['p-shared-tab'])).toEqual([]);
    // The hash was B's too: it stays in B's event, and in no rollup row.
    expect(await rowsHolding(shared.id, ['hash-evening'])).toEqual([{ table: 'analytics_events', column: 'visitor_id', rows: 1 }]);
    expect(await everyFigure(shared.id)).toEqual(figuresBefore);

    // What it means for B: a later event under the renamed hash that day is a new visitor, and B's sessions are B's.
    const dayZero = `/api/analytics?websiteId=${shared.id}&startDate=${day(0)}&endDate=${day(0)}`;
    const before = (await app.inject({ method: 'GET', url: dayZero, headers: admin })).json().data;
    await insertEvents(sql, shared.id, [{ page: '/blog', session: 'b-tab', visitor: 'hash-evening', device: 'desktop', at: `${day(0)}T19:10:00Z` }]);
    const after = (await app.inject({ method: 'GET', url: dayZero, headers: admin })).json().data;
    expect(after.uniqueVisitors).toBe(before.uniqueVisitors + 1);
    expect(after.sessions).toBe(before.sessions);
  });
});

describe('erasure against concurrent ingestion', () => {
  let app: FastifyInstance;
  let editor: { authorization: string };
  beforeAll(async () => {
    ({ app } = await buildTestAppWithLog({}, 'silent'));
    editor = await signedInUser(sql, ['editor']);
  });
  afterAll(async () => app?.close());

  /** `count` events of `who` (a visitor and its sessions) over the five days, some near midnight. */
  function eventsOf(who: string, count: number, seed: number): FixtureEvent[] {
    return Array.from({ length: count }, (_, n) => {
      const k = seed * 31 + n * 17;
      const minute = k % 3 === 0 ? 1438 + (k % 4) : (k * 7) % 1440;
      const at = new Date(Date.parse(`${day(k % DAYS)}T00:00:00Z`) + minute * 60_000 + (k % 60) * 1000).toISOString();
      return {
        session: `${who}-s${(k >> 2) % 3}`,
        visitor: `${who}-v${k % 2}`,
        device: (['desktop', 'mobile', 'tablet'] as const)[k % 3],
        page: `/p${k % 4}`,
        at,
        type: (k >> 1) % 5 === 0 ? 'click' : 'page_view',
        country: k % 4 === 0 ? 'DE' : 'FR',
        ...(k % 6 === 0 ? { campaign: { source: 'news', medium: 'email', name: who } } : {}),
        ...(k % 7 === 0 ? { referrerHost: 'example.org', loadTime: k % 900 } : {}),
      };
    });
  }

  /** The event rows of `websiteId` holding one of `ids` as visitor or session, as JSON (id included). */
  const eventsHolding = (websiteId: string, ids: string[]) =>
    sql<{ row: Record<string, unknown> }[]>`
      select to_jsonb(e) as row from public.analytics_events e
       where website_id = ${websiteId} and (visitor_id = any (${ids}) or session_id = any (${ids}))`;

  it('keeps every range equal to a recomputation from the events, the erased ones renamed', async () => {
    const [site, scratch] = [await createWebsite(app, 'Erasure under load'), await createWebsite(app, 'Erasure scratch')];
    // E: two visitor ids over three sessions; eight others of the same shape.
    await insertEvents(sql, site.id, eventsOf('e', 30, 1));
    for (let n = 0; n < 8; n += 1) await insertEvents(sql, site.id, eventsOf(`o${n}`, 20, n + 2));
    const personIds = ['e-v0', 'e-v1', 'e-s0', 'e-s1', 'e-s2'];
    const erasedBefore = await eventsHolding(site.id, personIds);
    expect(erasedBefore.length).toBe(30);

    // Statements of others, and of E (each such event marked by its page), go in while the erasure runs.
    const sentDuring: FixtureEvent[] = [];
    const concurrent = Array.from({ length: 12 }, async (_, n) => {
      await new Promise((resolve) => setTimeout(resolve, n * 3));
      const events = [...eventsOf(`o${n % 8}`, 10, 100 + n), ...eventsOf(`n${n}`, 5, 200 + n)];
      if (n % 2 === 0) {
        const mine = eventsOf('e', 3, 300 + n).map((event, k) => ({ ...event, page: `/during-${n}-${k}` }));
        sentDuring.push(...mine);
        events.push(...mine);
      }
      await insertEvents(sql, site.id, events);
    });
    const [erased] = await Promise.all([
      app.inject({ method: 'POST', url: `/api/analytics/websites/${site.id}/erasures`, headers: editor, payload: { visitorId: 'e-v0' } }),
      ...concurrent,
    ]);
    expect(erased.statusCode, erased.body).toBe(200);

    // E's events the erasure took: those before it, and those sent during it that are gone
    // (the others came after it, and are new members under the old ids).
    const stillThere = new Set((await eventsHolding(site.id, personIds)).map(({ row }) => row.page));
    const goneDuring = sentDuring.filter((event) => !stillThere.has(event.page));
    expect(erased.json().data).toMatchObject({ events: 30 + goneDuring.length, visitors: 2, sessions: 3 });
    // Written as events of a website of their own, to be read back whole.
    await insertEvents(sql, scratch.id, goneDuring);

    await sql.begin(async (tx) => {
      await tx`create temp table erasure_reference on commit drop as select * from public.analytics_events where website_id = ${site.id}`;
      await tx`create temp table erased_events on commit drop as select * from public.analytics_events where website_id = ${scratch.id}`;
      await tx`insert into erased_events
               select * from jsonb_populate_recordset(null::public.analytics_events, ${tx.json(erasedBefore.map(({ row }) => row) as postgres.JSONValue)}::jsonb)`;
      // One pseudonym for each old id, as the erasure gave them.
      await tx`update erased_events set website_id = ${site.id}, visitor_id = 'erased:' || visitor_id, session_id = 'erased:' || session_id`;
      await tx`insert into erasure_reference select * from erased_events`;
      for (const [startDate, endDate] of RANGES) {
        const range = { websiteId: site.id, startDate, endDate };
        const [expected, actual] = await Promise.all([reference(tx, range, 'erasure_reference'), fromRollups(tx, range)]);
        expect(actual, `${startDate}..${endDate}`).toEqual(expected);
      }
    });
  });

  it('gives pseudonyms no function of the old id could: the same erasure twice gives others', async () => {
    const site = await createWebsite(app, 'Erasure pseudonyms');
    await insertEvents(sql, site.id, eventsOf('e', 10, 7));
    // Each erasure in a transaction rolled back, so the second starts from the same rows.
    const rolledBack = new Error('rolled back on purpose');
    async function pseudonymsOfOneErasure() {
      let members: string[] = [];
      await sql
        .begin(async (tx) => {
          await tx`select * from public.erase_analytics_person(${site.id}, null, 'e-v0', null)`;
          const rows = await tx<{ member: string }[]>`
            select member from public.analytics_distinct_days where website_id = ${site.id}
            union select session_id from public.analytics_session_days where website_id = ${site.id} order by 1`;
          members = rows.map(({ member }) => member);
          throw rolledBack;
        })
        .catch((error) => {
          if (error !== rolledBack) throw error;
        });
      return members;
    }
    const [first, second] = [await pseudonymsOfOneErasure(), await pseudonymsOfOneErasure()];
    expect(first.length).toBe(5);
    for (const id of first) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(first.filter((id) => second.includes(id))).toEqual([]);
  });
});
