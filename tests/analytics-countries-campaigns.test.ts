import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodePair, readCampaign } from '../src/modules/analytics/campaign.ts';
import { createCountryLookup } from '../src/modules/analytics/geo.ts';
import { buildTestApp } from './support/app.ts';
import { createWebsite, type TestWebsite } from './support/analytics.ts';
import { testSql } from './support/db.ts';

// Countries from the client IP (the IP itself never stored) and campaign
// tags from the page URL, at ingestion; then in the summary and the daily series.

const sql = testSql();
afterAll(() => sql.end());

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';
const FIREFOX = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';
// Addresses whose country the shipped DB-IP Lite file names.
const US_IP = '8.8.8.8';
const GB_IP = '81.2.69.160';
const DE_IPV6 = '2a00:1450:4001::1';

describe('country lookup', () => {
  const countryOf = createCountryLookup();
  it('reads IPv4, IPv6 and IPv4-mapped IPv6; private, loopback and junk give null', () => {
    expect(countryOf(US_IP)).toBe('US');
    expect(countryOf(GB_IP)).toBe('GB');
    expect(countryOf(`::ffff:${GB_IP}`)).toBe('GB');
    expect(countryOf(DE_IPV6)).toBe('DE');
    for (const ip of ['127.0.0.1', '10.1.2.3', '::1', 'fe80::1', '', 'not an ip', '999.1.1.1']) expect(countryOf(ip)).toBeNull();
  });
});

describe('campaign tags', () => {
  it.each([
    ['/pricing', '/pricing', null, null, null],
    ['/p?utm_source=news&utm_medium=email&utm_campaign=spring', '/p', 'news', 'email', 'spring'],
    ['/p?a=1&utm_source=%20Twitter%20&b=2#top', '/p?a=1&b=2#top', 'Twitter', null, null],
    ['?utm_campaign=x&utm_term=t&utm_content=c', '/', null, null, 'x'],
    ['https://site.example/landing?utm_source=ads', 'https://site.example/landing', 'ads', null, null],
    ['/p?utm_source=&utm_medium=%00%01', '/p', null, null, null],
    ['/utm_source/page', '/utm_source/page', null, null, null],
    // The rest of the query is kept as sent, never re-encoded: one page stays one page.
    ['/search?q=hello world/path&utm_source=x', '/search?q=hello world/path', 'x', null, null],
    ['/p?q=a+b%2Fc&utm_medium=m&r=<é>%', '/p?q=a+b%2Fc&r=<é>%', null, 'm', null],
    ['/p?utm_medium=m&utm%5Fsource=s&x=1', '/p?x=1', 's', 'm', null],
    // A name written with escapes alone still names the tag.
    ['/p?utm%5Fsource=s', '/p', 's', null, null],
    ['/p?%75tm_campaign=c&x=1', '/p?x=1', null, null, 'c'],
    ['/p%20q?x=%41', '/p%20q?x=%41', null, null, null],
    ['/p?a&&b=1=2&utm_term=t', '/p?a&&b=1=2', null, null, null],
    ['/p?utm_source=first&utm_source=second', '/p', 'first', null, null],
  ])('%s → page %s', (input, page, utmSource, utmMedium, utmCampaign) => {
    expect(readCampaign(input)).toEqual({ page, campaign: { utmSource, utmMedium, utmCampaign } });
  });

  it('keeps at most 256 characters, never half a surrogate pair', () => {
    const { campaign } = readCampaign(`/?utm_source=${encodeURIComponent('🎉'.repeat(300))}`);
    expect([...(campaign.utmSource ?? '')]).toHaveLength(256);
    expect(campaign.utmSource).toBe('🎉'.repeat(256));
  });

  it('never makes the page longer: characters re-encoding would triple stay as they are', () => {
    const page = `/?utm_source=x&q=${'‹'.repeat(2000)}`;
    expect(readCampaign(page).page).toBe(`/?q=${'‹'.repeat(2000)}`);
  });

  it('any page: at most as long as sent, the other pairs kept byte for byte and in order', () => {
    const UTM = ['utm_source', 'utm_medium', 'utm_campaign', 'utm_term', 'utm_content'];
    const piece = fc.constantFrom('utm_source=s', 'utm_medium', 'utm_term=', 'utm%5Fcampaign=c', '&', '=', '?', '#', '%', '%2', '+', ' ', 'é', '‹', '/', 'a', '%41');
    const queryOf = (page: string) => {
      const beforeHash = page.split('#')[0];
      return beforeHash.includes('?') ? beforeHash.slice(beforeHash.indexOf('?') + 1) : '';
    };
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 30 }), (pieces) => {
        const sent = pieces.join('');
        const { page } = readCampaign(sent);
        expect(page.length).toBeLessThanOrEqual(Math.max(sent.length, 1));
        const isUtm = (pair: string) => [...new URLSearchParams(pair).keys()].some((name) => UTM.includes(name));
        if (!queryOf(sent).split('&').some(isUtm)) return void expect(page).toBe(sent);
        const expected = queryOf(sent).split('&').filter((pair) => !isUtm(pair)).join('&');
        expect(queryOf(page)).toBe(expected);
      }),
    );
  });

  it('any pair is read as URLSearchParams reads it, with or without anything to decode', () => {
    const piece = fc.oneof(
      fc.constantFrom('=', '?', '+', '%', '%2', '%41', '%zz', '%F0%9F', ' ', 'é', '🎉', '\uD800', '\uDC00', '\u0000', 'utm_source', 'a'),
      fc.string({ unit: 'binary', maxLength: 4 }),
    );
    fc.assert(
      fc.property(fc.array(piece, { maxLength: 12 }), (pieces) => {
        const pair = pieces.join('').replaceAll('&', '');
        expect(decodePair(pair)).toEqual(new URLSearchParams(pair).entries().next().value);
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('ingestion with countries and campaigns', () => {
  let app: FastifyInstance;
  let site: TestWebsite;
  beforeAll(async () => {
    app = await buildTestApp();
    site = await createWebsite(app, 'Countries and campaigns');
  });
  afterAll(async () => app?.close());

  const record = (remoteAddress: string, page: string, userAgent = CHROME) =>
    app.inject({
      method: 'POST',
      url: '/api/analytics',
      remoteAddress,
      payload: { websiteId: site.id, eventType: 'page_view', page, userAgent, sessionId: `s-${randomUUID()}` },
    });

  it('stores the country and the tags, never the IP, and counts unique visitors per country and tag', async () => {
    const answers = await Promise.all([
      record(US_IP, '/?utm_source=newsletter&utm_medium=email&utm_campaign=launch'),
      record(US_IP, '/pricing'),
      // Same address, another browser: another visitor.
      record(US_IP, '/', FIREFOX),
      record(GB_IP, '/?utm_source=newsletter&utm_medium=email&utm_campaign=launch'),
      record(GB_IP, '/?utm_source=twitter&utm_medium=social'),
      record(DE_IPV6, '/docs?utm_source=twitter'),
      record('127.0.0.1', '/'),
    ]);
    expect(answers.map((answer) => answer.statusCode)).toEqual([201, 201, 201, 201, 201, 201, 201]);
    const ids = answers.map((answer) => answer.json().data.id);

    const found = await sql`select * from public.analytics_events where id = any(${ids}::uuid[])`;
    const rows = ids.map((id) => found.find((row) => row.id === id));
    expect(rows.map((row) => [row?.country, row?.page, row?.utm_source, row?.utm_medium, row?.utm_campaign])).toEqual([
      ['US', '/', 'newsletter', 'email', 'launch'],
      ['US', '/pricing', null, null, null],
      ['US', '/', null, null, null],
      ['GB', '/', 'newsletter', 'email', 'launch'],
      ['GB', '/', 'twitter', 'social', null],
      ['DE', '/docs', 'twitter', null, null],
      [null, '/', null, null, null],
    ]);
    const stored = JSON.stringify(rows);
    for (const ip of [US_IP, GB_IP, DE_IPV6, '127.0.0.1']) expect(stored).not.toContain(ip);

    const today = new Date().toISOString().slice(0, 10);
    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}`, headers: { 'x-api-key': site.apiKey } });
    expect(summary.json().data).toMatchObject({
      pageViews: 7,
      uniqueVisitors: 5,
      topPages: [{ page: '/', views: 5 }, { page: '/docs', views: 1 }, { page: '/pricing', views: 1 }],
      countries: [{ country: 'US', visitors: 2 }, { country: 'DE', visitors: 1 }, { country: 'GB', visitors: 1 }],
      campaigns: {
        utmSource: [{ value: 'newsletter', visitors: 2 }, { value: 'twitter', visitors: 2 }],
        utmMedium: [{ value: 'email', visitors: 2 }, { value: 'social', visitors: 1 }],
        utmCampaign: [{ value: 'launch', visitors: 2 }],
      },
    });
    const byPath = await app.inject({ method: 'GET', url: `/api/analytics/website/${site.id}`, headers: { 'x-api-key': site.apiKey } });
    expect(byPath.json().data.countries).toEqual(summary.json().data.countries);

    const series = await app.inject({
      method: 'GET',
      url: `/api/analytics/date-range?websiteId=${site.id}&startDate=${today}&endDate=${today}`,
      headers: { 'x-api-key': site.apiKey },
    });
    expect(series.json().data.days).toEqual([
      {
        date: today,
        pageViews: 7,
        uniqueVisitors: 5,
        sessions: 7,
        countries: [{ country: 'US', visitors: 2 }, { country: 'DE', visitors: 1 }, { country: 'GB', visitors: 1 }],
      },
    ]);
  });

  it('a tagged page near the length limit is stored as sent minus its tags, and its batch with it', async () => {
    // 2,045 bytes as sent, within the page's 2,048; re-encoded (each ‹ as %E2%80%B9), this page would be
    // over 6,000 characters, and the table's check (2,048) would fail its whole batch.
    const own = await createWebsite(app, 'Long tagged page');
    const post = (page: string) =>
      app.inject({ method: 'POST', url: '/api/analytics', payload: { websiteId: own.id, eventType: 'page_view', page, userAgent: CHROME, sessionId: `s-${randomUUID()}` } });
    const long = `/?q=${'‹'.repeat(676)}`;
    // Sent together, so they share a batch.
    const answers = await Promise.all([post(`/?utm_source=x&q=${'‹'.repeat(676)}`), post('/a'), post('/b'), post('/c')]);
    expect(answers.map((answer) => answer.statusCode)).toEqual([201, 201, 201, 201]);
    const ids = answers.map((answer) => answer.json().data.id);
    const found = await sql`select id, page, utm_source from public.analytics_events where id = any(${ids}::uuid[])`;
    const rows = ids.map((id) => found.find((row) => row.id === id));
    expect(rows.map((row) => [row?.page, row?.utm_source])).toEqual([[long, 'x'], ['/a', null], ['/b', null], ['/c', null]]);
  });
});
