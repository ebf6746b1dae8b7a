import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Browser } from 'playwright-core';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { createWebsite } from './support/analytics.ts';
import { launchChromium } from './support/browser.ts';

// The tracking script (GET /script.js) in Chromium: a site on a second
// origin on loopback carries the one tag; page views, an SPA route change,
// the load time and custom events reach analytics_events through the
// text/plain beacon, with no cookie set; Global Privacy Control turns it off.

// isbot rightly ignores HeadlessChrome, so the page presents itself as a desktop browser.
const DESKTOP = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/147.0.0.0 Safari/537.36';

interface StoredEvent {
  event_type: string;
  page: string;
  referrer: string | null;
  session_id: string;
  device_type: string;
  metadata: Record<string, unknown>;
}

describe('the tracking script', () => {
  let app: FastifyInstance;
  let api: string;
  let site: Server;
  let siteOrigin: string;
  let browser: Browser;
  let sql: postgres.Sql;
  let websiteId: string;
  let apiKey: string;

  const page = (title: string, body = '') => `<!doctype html><html><head><title>${title}</title>
    <script defer src="${api}/script.js" data-website-id="${websiteId}"></script></head>
    <body><h1>${title}</h1>${body}</body></html>`;

  beforeAll(async () => {
    app = await buildTestApp();
    api = (await app.listen({ host: '127.0.0.1', port: 0 })).replace('127.0.0.1', 'localhost');
    ({ id: websiteId, apiKey } = await createWebsite(app, 'Tracked portfolio'));
    // The tracked site: another origin (127.0.0.1 and another port, against the API's localhost).
    site = createServer((request, response) => {
      const html =
        request.url === '/gpc'
          ? page('Private')
          : page('Home', '<button data-event="contact" data-event-channel="email">Contact me</button><a href="/about">About</a>');
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
    });
    await new Promise<void>((resolve) => site.listen(0, '127.0.0.1', resolve));
    siteOrigin = `http://127.0.0.1:${(site.address() as AddressInfo).port}`;
    browser = await launchChromium();
    sql = postgres(inject('stack').databaseUrl, { max: 1, onnotice: () => {} });
  });
  afterAll(async () => {
    await browser?.close();
    await new Promise((resolve) => site?.close(resolve));
    await app?.close();
    await sql?.end();
  });

  const events = () =>
    sql<StoredEvent[]>`
      select event_type, page, referrer, session_id, device_type, metadata
        from public.analytics_events where website_id = ${websiteId} order by created_at, id`;

  it('is served with an ETag, an hour of caching, and a policy that lets other sites load it', async () => {
    const first = await fetch(`${api}/script.js`);
    expect(first.status).toBe(200);
    expect(first.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(first.headers.get('cross-origin-resource-policy')).toBe('cross-origin');
    expect(first.headers.get('cache-control')).toBe('public, max-age=3600');
    const body = await first.text();
    expect(body).toContain('navigator.sendBeacon');
    expect(Buffer.byteLength(body)).toBeLessThan(8 * 1024);
    const etag = first.headers.get('etag')!;
    const again = await fetch(`${api}/script.js`, { headers: { 'if-none-match': etag } });
    expect(again.status).toBe(304);
    expect(await again.text()).toBe('');
  });

  it('records page views, an SPA route change, the load time and custom events from another origin, with no cookie', async () => {
    const context = await browser.newContext({ userAgent: DESKTOP, viewport: { width: 1280, height: 800 } });
    const tab = await context.newPage();
    const pageErrors: string[] = [];
    tab.on('pageerror', (error) => pageErrors.push(error.message));
    tab.on('console', (message) => {
      if (message.type() === 'error') pageErrors.push(message.text());
    });

    await tab.goto(`${siteOrigin}/?from=test`, { referer: 'https://news.example.org/post/1' });
    await expect.poll(async () => (await events()).length, { timeout: 10_000 }).toBe(1);

    await tab.click('button[data-event]');
    await tab.evaluate(`history.pushState({}, '', '/projects?utm_source=newsletter&utm_campaign=launch')`);
    await tab.evaluate(`window.portfolioAnalytics.track('download', { file: 'cv.pdf' })`);
    await expect.poll(async () => (await events()).length, { timeout: 10_000 }).toBe(4);

    const [view, click, route, download] = await events();
    expect(view).toMatchObject({
      event_type: 'page_view',
      page: '/?from=test',
      referrer: 'https://news.example.org/post/1',
      device_type: 'desktop',
      metadata: { title: 'Home', screen: expect.stringMatching(/^\d+x\d+$/), language: expect.any(String) },
    });
    // metadata.loadTime (ms) is what the summary's avgLoadTime averages.
    expect(view.metadata.loadTime).toEqual(expect.any(Number));
    expect(view.metadata.loadTime as number).toBeGreaterThan(0);
    expect(click).toMatchObject({ event_type: 'custom', page: '/?from=test', metadata: { event: 'contact', channel: 'email' } });
    expect(route).toMatchObject({
      event_type: 'page_view',
      page: '/projects?utm_source=newsletter&utm_campaign=launch',
      referrer: `${siteOrigin}/?from=test`,
      metadata: { navigation: 'spa' },
    });
    expect(download).toMatchObject({ event_type: 'custom', page: '/projects?utm_source=newsletter&utm_campaign=launch', metadata: { event: 'download', file: 'cv.pdf' } });
    // One tab, one session; no cookie on either origin.
    expect(new Set([view, click, route, download].map((event) => event.session_id)).size).toBe(1);
    expect(await context.cookies()).toEqual([]);
    expect(pageErrors).toEqual([]);

    // And the site owner's figures: the summary counts them, load time included.
    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${websiteId}`, headers: { 'x-api-key': apiKey } });
    expect(summary.json().data).toMatchObject({ pageViews: 2, uniqueVisitors: 1, sessions: 1, devices: [{ type: 'desktop', count: 1 }] });
    expect(summary.json().data.avgLoadTime).toBeGreaterThan(0);
    expect(summary.json().data.referrers).toContainEqual({ source: 'news.example.org', count: 1 });
    const live = await app.inject({ method: 'GET', url: `/api/analytics/realtime?websiteId=${websiteId}`, headers: { 'x-api-key': apiKey } });
    expect(live.json().data).toMatchObject({ activeVisitors: 1, pageViews: 2 });
    await context.close();
  });

  it('sends nothing when the browser signals Global Privacy Control', async () => {
    const before = (await events()).length;
    const context = await browser.newContext({ userAgent: DESKTOP });
    await context.addInitScript('Object.defineProperty(navigator, "globalPrivacyControl", { get: () => true })');
    const tab = await context.newPage();
    await tab.goto(`${siteOrigin}/gpc`);
    await tab.waitForLoadState('load');
    await tab.evaluate(`window.portfolioAnalytics === undefined`).then((absent) => expect(absent).toBe(true));
    // Give a beacon time to arrive, were one sent.
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    expect((await events()).length).toBe(before);
    await context.close();
  });
});
