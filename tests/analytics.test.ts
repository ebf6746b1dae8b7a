import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { addDays, utcDay } from '../src/modules/analytics/dates.ts';
import { buildTestApp } from './support/app.ts';
import { adminToken, createWebsite, type FixtureEvent, insertEvents, type TestWebsite } from './support/analytics.ts';
import { asUser, createAuthUser, grantRole, testSql } from './support/db.ts';

// Analytics queries (issue 5): exact metric values on a small hand-built data
// set, who may read them (roles, or the website's own key for that website
// only), and the validation of dates.

const sql = testSql();
afterAll(() => sql.end());

const GOOGLE_ADS = { source: 'google', medium: 'cpc', name: 'spring' };
const NEWSLETTER = { source: 'newsletter', medium: 'email', name: 'launch' };

// Four days, the third empty. vA visits three times (s1, s3, s6); s3 runs
// over midnight; s2 and s6 bounce; s5 has a click and no page view.

const EVENTS: FixtureEvent[] = [
  { session: 's1', visitor: 'vA', device: 'desktop', page: '/home', at: '2026-03-01T10:00:00Z', referrerHost: 'google.com', loadTime: 100, country: 'DE', campaign: GOOGLE_ADS },
  { session: 's1', visitor: 'vA', device: 'desktop', page: '/about', at: '2026-03-01T10:01:00Z', loadTime: 300, country: 'DE' },
  { session: 's1', visitor: 'vA', device: 'desktop', page: '/about', at: '2026-03-01T10:02:30Z', type: 'click', country: 'DE' },
  { session: 's2', visitor: 'vB', device: 'mobile', page: '/home', at: '2026-03-01T11:00:00Z', referrerHost: 'news.ycombinator.com', country: 'US' },
  { session: 's3', visitor: 'vA', device: 'desktop', page: '/pricing', at: '2026-03-01T23:59:00Z', referrerHost: 'google.com', country: 'DE' },
  { session: 's3', visitor: 'vA', device: 'desktop', page: '/home', at: '2026-03-02T00:00:30Z', country: 'DE' },
  { session: 's4', visitor: 'user-42', device: 'tablet', page: '/home', at: '2026-03-02T09:00:00Z', loadTime: 250, country: 'DE' },
  { session: 's4', visitor: 'user-42', device: 'tablet', page: '/contact', at: '2026-03-02T09:00:20Z', type: 'form_submit', country: 'DE' },
  { session: 's5', visitor: 'vB', device: 'mobile', page: '/home', at: '2026-03-02T12:00:00Z', type: 'click', country: 'US' },
  { session: 's6', visitor: 'vA', device: 'desktop', page: '/about', at: '2026-03-04T08:00:00Z', referrerHost: 'google.com', country: 'DE', campaign: GOOGLE_ADS },
  { session: 's7', visitor: 'vD', device: 'mobile', page: '/pricing', at: '2026-03-04T15:00:00Z', country: 'FR', campaign: NEWSLETTER },
  { session: 's7', visitor: 'vD', device: 'mobile', page: '/home', at: '2026-03-04T15:05:00Z', referrerHost: 'twitter.com', country: 'FR' },
];

const EMPTY = {
  pageViews: 0,
  uniqueVisitors: 0,
  sessions: 0,
  avgSessionDuration: 0,
  bounceRate: 0,
  topPages: [],
  referrers: [],
  devices: [],
  avgLoadTime: null,
  countries: [],
  campaigns: { utmSource: [], utmMedium: [], utmCampaign: [] },
};

describe('analytics summaries', () => {
  let app: FastifyInstance;
  let site: TestWebsite;
  let other: TestWebsite;
  let admin: string;

  beforeAll(async () => {
    app = await buildTestApp();
    admin = await adminToken();
    [site, other] = [await createWebsite(app, 'Fixture site'), await createWebsite(app, 'Other site')];
    // Out of order, in three statements: later days first, so rows are relinked.
    await insertEvents(sql, site.id, EVENTS.filter((event) => event.at >= '2026-03-04'));
    await insertEvents(sql, site.id, EVENTS.filter((event) => event.at.startsWith('2026-03-02')));
    await insertEvents(sql, site.id, EVENTS.filter((event) => event.at < '2026-03-02'));
    await insertEvents(sql, other.id, [{ session: 'x1', visitor: 'vX', device: 'desktop', page: '/x', at: '2026-03-01T12:00:00Z' }]);
  });
  afterAll(async () => app?.close());

  const summary = (query: string, headers: Record<string, string>) =>
    app.inject({ method: 'GET', url: `/api/analytics?${query}`, headers });

  it('the whole four days, exactly', async () => {
    const response = await summary(`websiteId=${site.id}&startDate=2026-03-01&endDate=2026-03-04`, { 'x-api-key': site.apiKey });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({
      success: true,
      data: {
        websiteId: site.id,
        startDate: '2026-03-01',
        endDate: '2026-03-04',
        pageViews: 9,
        uniqueVisitors: 4,
        sessions: 7,
        // (150 + 0 + 90 + 20 + 0 + 0 + 300) / 7 = 80 seconds
        avgSessionDuration: 80,
        // s2 and s6 of 7
        bounceRate: 0.2857,
        topPages: [
          { page: '/home', views: 5 },
          { page: '/about', views: 2 },
          { page: '/pricing', views: 2 },
        ],
        referrers: [
          { source: 'google.com', count: 3 },
          { source: 'news.ycombinator.com', count: 1 },
          { source: 'twitter.com', count: 1 },
        ],
        devices: [
          { type: 'desktop', count: 3 },
          { type: 'mobile', count: 3 },
          { type: 'tablet', count: 1 },
        ],
        // (100 + 300 + 250) / 3
        avgLoadTime: 216.67,
        // vA and user-42 in Germany, vB in the US, vD in France; vA counted once over its three days.
        countries: [
          { country: 'DE', visitors: 2 },
          { country: 'FR', visitors: 1 },
          { country: 'US', visitors: 1 },
        ],
        // vA came from the ad twice (s1, s6): one visitor.
        campaigns: {
          utmSource: [{ value: 'google', visitors: 1 }, { value: 'newsletter', visitors: 1 }],
          utmMedium: [{ value: 'cpc', visitors: 1 }, { value: 'email', visitors: 1 }],
          utmCampaign: [{ value: 'launch', visitors: 1 }, { value: 'spring', visitors: 1 }],
        },
      },
    });
  });

  it('one day: a session crossing midnight counts only its events of that day', async () => {
    const response = await summary(`websiteId=${site.id}&startDate=2026-03-02&endDate=2026-03-02`, { 'x-api-key': site.apiKey });
    expect(response.json().data).toMatchObject({
      pageViews: 2,
      uniqueVisitors: 3,
      sessions: 3,
      // s3 has one event that day (0 s), s4 20 s, s5 0 s: 20 / 3 → 7
      avgSessionDuration: 7,
      // s3's single page view that day is a bounce there; s5 (a click) is not.
      bounceRate: 0.3333,
      topPages: [
        { page: '/home', views: 2 },
      ],
      referrers: [],
      devices: [
        { type: 'desktop', count: 1 },
        { type: 'mobile', count: 1 },
        { type: 'tablet', count: 1 },
      ],
      avgLoadTime: 250,
      countries: [
        { country: 'DE', visitors: 2 },
        { country: 'US', visitors: 1 },
      ],
      campaigns: { utmSource: [], utmMedium: [], utmCampaign: [] },
    });
  });

  it('two days: distinct visitors and sessions are not summed per day', async () => {
    const response = await summary(`websiteId=${site.id}&startDate=2026-03-01&endDate=2026-03-02`, { authorization: `Bearer ${admin}` });
    expect(response.json().data).toMatchObject({
      pageViews: 6,
      uniqueVisitors: 3,
      sessions: 5,
      avgSessionDuration: 52,
      bounceRate: 0.2,
      countries: [
        { country: 'DE', visitors: 2 },
        { country: 'US', visitors: 1 },
      ],
      devices: [
        { type: 'desktop', count: 2 },
        { type: 'mobile', count: 2 },
        { type: 'tablet', count: 1 },
      ],
    });
  });

  it('the empty day has zeros, empty lists and no load time', async () => {
    const response = await summary(`websiteId=${site.id}&startDate=2026-03-03&endDate=2026-03-03`, { 'x-api-key': site.apiKey });
    expect(response.json().data).toEqual({ websiteId: site.id, startDate: '2026-03-03', endDate: '2026-03-03', ...EMPTY });
  });

  it('GET /api/analytics/website/:websiteId gives the same summary', async () => {
    const query = 'startDate=2026-03-01&endDate=2026-03-04';
    const byQuery = await summary(`websiteId=${site.id}&${query}`, { 'x-api-key': site.apiKey });
    const byPath = await app.inject({ method: 'GET', url: `/api/analytics/website/${site.id}?${query}`, headers: { 'x-api-key': site.apiKey } });
    expect(byPath.statusCode).toBe(200);
    expect(byPath.json()).toEqual(byQuery.json());
  });

  it('date-range: one entry per day, the empty day included', async () => {
    const response = await app.inject({
      method: 'GET',
      url: `/api/analytics/date-range?websiteId=${site.id}&startDate=2026-02-28&endDate=2026-03-04`,
      headers: { authorization: `Bearer ${admin}` },
    });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({
      success: true,
      data: {
        websiteId: site.id,
        startDate: '2026-02-28',
        endDate: '2026-03-04',
        days: [
          { date: '2026-02-28', pageViews: 0, uniqueVisitors: 0, sessions: 0, countries: [] },
          { date: '2026-03-01', pageViews: 4, uniqueVisitors: 2, sessions: 3, countries: [{ country: 'DE', visitors: 1 }, { country: 'US', visitors: 1 }] },
          { date: '2026-03-02', pageViews: 2, uniqueVisitors: 3, sessions: 3, countries: [{ country: 'DE', visitors: 2 }, { country: 'US', visitors: 1 }] },
          { date: '2026-03-03', pageViews: 0, uniqueVisitors: 0, sessions: 0, countries: [] },
          { date: '2026-03-04', pageViews: 3, uniqueVisitors: 2, sessions: 2, countries: [{ country: 'DE', visitors: 1 }, { country: 'FR', visitors: 1 }] },
        ],
      },
    });
  });

  it('without dates: the last 30 days up to today (UTC)', async () => {
    const response = await summary(`websiteId=${site.id}`, { 'x-api-key': site.apiKey });
    expect(response.statusCode).toBe(200);
    const today = utcDay(new Date());
    expect(response.json().data).toMatchObject({ startDate: addDays(today, -29), endDate: today });
    const series = await app.inject({ method: 'GET', url: `/api/analytics/date-range?websiteId=${site.id}`, headers: { 'x-api-key': site.apiKey } });
    expect(series.json().data.days).toHaveLength(30);
  });

  it('with only an endDate in January 1970: the range starts on 1970-01-01, the first day a range may name', async () => {
    for (const [endDate, days] of [
      ['1970-01-01', 1],
      ['1970-01-10', 10],
      // 29 days back is 1970-01-01 itself: the full 30 days.
      ['1970-01-30', 30],
    ] as const) {
      const response = await summary(`websiteId=${site.id}&endDate=${endDate}`, { 'x-api-key': site.apiKey });
      expect(response.statusCode, endDate).toBe(200);
      expect(response.json().data, endDate).toMatchObject({ startDate: '1970-01-01', endDate, pageViews: 0 });
      const series = await app.inject({ method: 'GET', url: `/api/analytics/date-range?websiteId=${site.id}&endDate=${endDate}`, headers: { 'x-api-key': site.apiKey } });
      expect(series.statusCode, endDate).toBe(200);
      expect(series.json().data.days.map((day: { date: string }) => day.date), endDate).toEqual(Array.from({ length: days }, (_, i) => addDays('1970-01-01', i)));
    }
  });

  it("a website's key reads that website only", async () => {
    const dates = 'startDate=2026-03-01&endDate=2026-03-04';
    const own = await summary(`websiteId=${other.id}&${dates}`, { 'x-api-key': other.apiKey });
    expect(own.statusCode).toBe(200);
    expect(own.json().data.pageViews).toBe(1);
    for (const url of [
      `/api/analytics?websiteId=${site.id}&${dates}`,
      `/api/analytics/website/${site.id}?${dates}`,
      `/api/analytics/date-range?websiteId=${site.id}&${dates}`,
    ]) {
      const refused = await app.inject({ method: 'GET', url, headers: { 'x-api-key': other.apiKey } });
      expect(refused.statusCode, url).toBe(403);
      expect(refused.json()).toEqual({ success: false, error: 'Insufficient permissions', statusCode: 403 });
    }
  });

  it('no credentials, an unknown key or a bad token → 401', async () => {
    const url = `/api/analytics?websiteId=${site.id}`;
    for (const headers of [
      {},
      { 'x-api-key': 'wsk_' + 'A'.repeat(43) },
      { 'x-api-key': 'not-a-key' },
      { authorization: 'Bearer not-a-jwt' },
    ]) {
      const response = await app.inject({ method: 'GET', url, headers });
      expect(response.statusCode, JSON.stringify(headers)).toBe(401);
      expect(response.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
    }
  });

  it('every read answer is Cache-Control: no-store, refusals too; the ingest answer is not one of them', async () => {
    const dates = 'startDate=2026-03-01&endDate=2026-03-04';
    const key = { 'x-api-key': site.apiKey };
    // Each read, and a variant that validation refuses (400).
    const reads: Array<[string, string, Record<string, string>]> = [
      [`/api/analytics?websiteId=${site.id}&${dates}`, `/api/analytics?websiteId=${site.id}&startDate=2026-02-30`, key],
      [`/api/analytics/website/${site.id}?${dates}`, `/api/analytics/website/${site.id}?endDate=yesterday`, key],
      [`/api/analytics/date-range?websiteId=${site.id}&${dates}`, `/api/analytics/date-range?websiteId=${site.id}&startDate=2026-02-30`, key],
      [`/api/analytics/realtime?websiteId=${site.id}`, '/api/analytics/realtime?websiteId=not-a-uuid', key],
      [`/api/analytics/date-range/export?websiteId=${site.id}&${dates}`, `/api/analytics/date-range/export?websiteId=${site.id}&startDate=2026-02-30`, { authorization: `Bearer ${admin}` }],
    ];
    for (const [url, invalid, headers] of reads) {
      const read = await app.inject({ method: 'GET', url, headers });
      expect(read.statusCode, url).toBe(200);
      expect(read.headers['cache-control'], url).toBe('no-store');
      // Refused before the handler runs: no credentials (401), a bad query (400). Not for a cache either.
      const anonymous = await app.inject({ method: 'GET', url });
      expect(anonymous.statusCode, url).toBe(401);
      expect(anonymous.headers['cache-control'], url).toBe('no-store');
      const refused = await app.inject({ method: 'GET', url: invalid, headers });
      expect(refused.statusCode, invalid).toBe(400);
      expect(refused.headers['cache-control'], invalid).toBe('no-store');
    }
    // Ingestion answers say nothing of a website's figures: the scope-wide header is not put on them.
    const ingest = await app.inject({
      method: 'POST',
      url: '/api/analytics',
      payload: { websiteId: other.id, eventType: 'page_view', page: '/x', userAgent: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/126.0 Safari/537.36', sessionId: 'cache-check' },
    });
    expect(ingest.statusCode).toBe(201);
    expect(ingest.headers['cache-control']).toBeUndefined();
  });

  it('an unknown website → 404 Website not found', async () => {
    const response = await summary(`websiteId=${crypto.randomUUID()}`, { authorization: `Bearer ${admin}` });
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
  });

  it.each([
    ['startDate=2026-02-30&endDate=2026-03-04', 'startDate', 'Start date must be a date written YYYY-MM-DD'],
    ['startDate=2026-3-01&endDate=2026-03-04', 'startDate', 'Start date must be a date written YYYY-MM-DD'],
    ['startDate=2026-03-01&endDate=yesterday', 'endDate', 'End date must be a date written YYYY-MM-DD'],
    ['startDate=2026-03-05&endDate=2026-03-04', 'startDate', 'Start date must not be after end date'],
    ['startDate=2025-03-01&endDate=2026-03-02', 'endDate', 'Date range must be at most one year'],
    ['startDate=2024-02-29&endDate=2025-03-02', 'endDate', 'Date range must be at most one year'],
    // endDate not given (today): the field the caller sent is the one to change.
    ['startDate=2020-01-01', 'startDate', 'Date range must be at most one year'],
    ['startDate=1969-12-31&endDate=1970-01-02', 'startDate', 'Start date must be from 1970-01-01 to 9999-12-31'],
    // Years 0 to 99 are days too (Date.UTC read 0100 as 1900); only not ones a range may name.
    ['endDate=0100-01-01', 'endDate', 'End date must be from 1970-01-01 to 9999-12-31'],
    // Given twice (URLSearchParams.append): said as that, as for every key, not zod's "Invalid input: expected string, received array".
    ['startDate=2026-03-01&startDate=2026-03-02&endDate=2026-03-04', 'startDate', 'startDate must be given once, not 2 times'],
    ['startDate=2026-03-01&endDate=2026-03-03&endDate=2026-03-04', 'endDate', 'endDate must be given once, not 2 times'],
  ])('dates %s → 400 on %s', async (query, field, message) => {
    for (const url of [`/api/analytics?websiteId=${site.id}&${query}`, `/api/analytics/date-range?websiteId=${site.id}&${query}`]) {
      const response = await app.inject({ method: 'GET', url, headers: { 'x-api-key': site.apiKey } });
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { [field]: [message] } });
    }
  });

  it('a day to the same day a year later is allowed, across 29 February too; a missing or malformed websiteId is refused', async () => {
    for (const [startDate, endDate] of [
      ['2025-03-03', '2026-03-03'],
      ['2023-11-26', '2024-11-26'],
      ['2024-02-29', '2025-03-01'],
      // The last days a range may name: a year after 9999-12-31 no longer has four digits.
      ['9999-01-01', '9999-12-31'],
      ['9999-12-31', '9999-12-31'],
    ]) {
      const allowed = await summary(`websiteId=${site.id}&startDate=${startDate}&endDate=${endDate}`, { 'x-api-key': site.apiKey });
      expect(allowed.statusCode, startDate).toBe(200);
      expect(allowed.json().data, startDate).toMatchObject({ startDate, endDate });
    }
    // A start after today (UTC), alone, is a caller east of UTC asking for its own today: the range is that day.
    const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10);
    const ahead = await summary(`websiteId=${site.id}&startDate=${tomorrow}`, { 'x-api-key': site.apiKey });
    expect(ahead.statusCode).toBe(200);
    expect(ahead.json().data).toMatchObject({ startDate: tomorrow, endDate: tomorrow, pageViews: 0 });
    const missing = await summary('', { authorization: `Bearer ${admin}` });
    expect(missing.json()).toMatchObject({ statusCode: 400, details: { websiteId: ['Website id is required'] } });
    const malformed = await summary('websiteId=nope', { authorization: `Bearer ${admin}` });
    expect(malformed.json()).toMatchObject({ statusCode: 400, details: { websiteId: ['Website id must be a UUID'] } });
  });
});

describe('row-level security on analytics tables', () => {
  let app: FastifyInstance;
  let site: TestWebsite;
  const tables = [
    'analytics_events',
    'analytics_daily_totals',
    'analytics_daily_pages',
    'analytics_daily_distinct',
    'analytics_daily_sessions',
    'analytics_dimension_days',
    'analytics_daily_dimensions',
  ];

  beforeAll(async () => {
    app = await buildTestApp();
    site = await createWebsite(app, 'RLS site');
    await insertEvents(sql, site.id, EVENTS.slice(0, 4));
  });
  afterAll(async () => app?.close());

  it.each(['viewer', 'editor', 'admin'] as const)('a %s reads events and rollups', async (role) => {
    const user = await createAuthUser(sql);
    await grantRole(sql, user.id, role);
    for (const table of tables) {
      const rows = await asUser(sql, user.id, (tx) => tx`select count(*)::int as n from ${tx('public.' + table)} where website_id = ${site.id}`);
      expect(rows[0].n, table).toBeGreaterThan(0);
    }
  });

  it('a user without a role reads nothing; anon may not even ask', async () => {
    const user = await createAuthUser(sql);
    for (const table of tables) {
      const rows = await asUser(sql, user.id, (tx) => tx`select count(*)::int as n from ${tx('public.' + table)} where website_id = ${site.id}`);
      expect(rows[0].n, table).toBe(0);
      await expect(asUser(sql, null, (tx) => tx`select 1 from ${tx('public.' + table)}`)).rejects.toMatchObject({ code: '42501' });
    }
  });

  it('no API role writes events or rollups directly, not even an admin', async () => {
    const user = await createAuthUser(sql);
    await grantRole(sql, user.id, 'admin');
    await expect(
      asUser(sql, user.id, (tx) => tx`
        insert into public.analytics_events (id, website_id, event_type, page, user_agent, device_type, session_id, visitor_id)
        values (gen_random_uuid(), ${site.id}, 'page_view', '/', 'ua', 'desktop', 's', 'v')`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(
      asUser(sql, user.id, (tx) => tx`update public.analytics_daily_totals set events = 0 where website_id = ${site.id}`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(
      asUser(sql, user.id, (tx) => tx`update public.analytics_daily_dimensions set visitors = 0 where website_id = ${site.id}`),
    ).rejects.toMatchObject({ code: '42501' });
  });

  it('events are append-only; deleting the website removes them with their rollups', async () => {
    await expect(sql`delete from public.analytics_events where website_id = ${site.id}`).rejects.toMatchObject({ code: '55000' });
    await expect(sql`update public.analytics_events set page = '/x' where website_id = ${site.id}`).rejects.toMatchObject({ code: '55000' });
    const doomed = await createWebsite(app, 'Doomed');
    await insertEvents(sql, doomed.id, EVENTS.slice(0, 3));
    await sql`delete from public.websites where id = ${doomed.id}`;
    for (const table of [...tables, 'analytics_session_days', 'analytics_distinct_days', 'analytics_daily_referrers']) {
      const [row] = await sql`select count(*)::int as n from ${sql('public.' + table)} where website_id = ${doomed.id}`;
      expect(row.n, table).toBe(0);
    }
  });
});
