import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Browser, BrowserContext } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp } from './support/app.ts';
import { createWebsite, type TestWebsite } from './support/analytics.ts';
import { launchChromium } from './support/browser.ts';
import { testSql } from './support/db.ts';

// The tracker end to end: a page served from a second origin on loopback
// carries the one script tag pointing at the API; Chromium loads it,
// navigates (a landing page with campaign tags, SPA route changes, back),
// clicks, and the events are in the database with the right fields, in the
// summary's countries and campaigns, and in the dashboard's live count.
//
// The API trusts one proxy hop here (TRUST_PROXY=1), as behind a proxy; the browser sends
// a British address in it, so the country lookup has a public IP to read.

const BRITISH_IP = '81.2.69.160';
// Headless Chromium names itself HeadlessChrome, which bot detection drops.
const DESKTOP_CHROME = 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/147.0.0.0 Safari/537.36';

const sql = testSql();

function sitePage(api: string, websiteId: string) {
  return `<!doctype html>
<html><head><title>Another site</title>
<script defer src="${api}/script.js" data-website-id="${websiteId}"></script>
</head><body>
<a id="to-pricing" href="/pricing">Pricing</a>
<button id="signup" data-event="signup" data-event-plan="pro">Sign up</button>
<button id="play">Play</button>
<script>
  document.getElementById('to-pricing').addEventListener('click', function (e) { e.preventDefault(); history.pushState({}, '', '/pricing'); });
  document.getElementById('play').addEventListener('click', function () { window.portfolioAnalytics.track('video-play', { seconds: 12 }); });
</script>
</body></html>`;
}

/** A single-page app that, as routers do while hydrating, rewrites its own URL before the load event. */
function hydratingPage(api: string, websiteId: string, image: string) {
  return `<!doctype html>
<html><head><title>Hydrating</title>
<script defer src="${api}/script.js" data-website-id="${websiteId}"></script>
</head><body>
<img src="${image}" alt="">
<script>
  document.addEventListener('DOMContentLoaded', function () { history.replaceState({ hydrated: true }, '', location.pathname); });
</script>
</body></html>`;
}

interface StoredEvent {
  event_type: string;
  page: string;
  referrer: string | null;
  referrer_host: string | null;
  session_id: string;
  visitor_id: string;
  user_agent: string;
  device_type: string;
  country: string | null;
  utm_source: string | null;
  utm_medium: string | null;
  utm_campaign: string | null;
  metadata: Record<string, unknown>;
}

describe('the tracker in Chromium, from another origin', () => {
  let app: FastifyInstance;
  let api: string;
  let siteServer: Server;
  let siteOrigin: string;
  let browser: Browser;
  let site: TestWebsite;

  beforeAll(async () => {
    app = await buildTestApp({ TRUST_PROXY: '1' });
    api = await app.listen({ host: '127.0.0.1', port: 0 });
    site = await createWebsite(app, 'Tracked elsewhere');
    // The second origin: another port on loopback, serving the page for any path (as an SPA host does).
    siteServer = createServer((request, response) => {
      const url = new URL(request.url ?? '/', 'http://x');
      const websiteId = url.searchParams.get('site') ?? site.id;
      // An image that holds the load event back, for the hydrating page below.
      // An image that never comes: the page's load event never fires.
      if (url.pathname === '/never.gif') return;
      if (url.pathname === '/slow.gif') {
        setTimeout(() => response.writeHead(200, { 'content-type': 'image/gif' }).end(Buffer.from('R0lGODlhAQABAAAAACw=', 'base64')), 400);
        return;
      }
      const html = url.pathname === '/hydrating' || url.pathname === '/stalled' ? hydratingPage(api, websiteId, url.pathname === '/stalled' ? '/never.gif' : '/slow.gif') : sitePage(api, websiteId);
      response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
    });
    await new Promise<void>((resolve) => siteServer.listen(0, '127.0.0.1', resolve));
    siteOrigin = `http://127.0.0.1:${(siteServer.address() as AddressInfo).port}`;
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    siteServer?.closeAllConnections();
    await new Promise((resolve) => siteServer?.close(resolve));
    await app?.close();
    await sql.end();
  });

  const eventsOf = (websiteId: string) =>
    sql<StoredEvent[]>`
      select event_type, page, referrer, referrer_host, session_id, visitor_id, user_agent, device_type,
             country, utm_source, utm_medium, utm_campaign, metadata
        from public.analytics_events where website_id = ${websiteId} order by id`;

  async function visitorContext(): Promise<BrowserContext> {
    return browser.newContext({ userAgent: DESKTOP_CHROME, extraHTTPHeaders: { 'x-forwarded-for': BRITISH_IP } });
  }

  it('records page views, route changes, referrer, load time, clicks and custom events; sets no cookie', async () => {
    const context = await visitorContext();
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));

    await page.goto(`${siteOrigin}/landing?utm_source=newsletter&utm_medium=email&utm_campaign=spring&token=secret`, {
      referer: 'http://news.example.org/some/post',
    });
    await expect.poll(async () => (await eventsOf(site.id)).length, { timeout: 10_000 }).toBe(1);

    await page.click('#to-pricing');
    await expect.poll(async () => (await eventsOf(site.id)).length).toBe(2);
    await page.click('#signup');
    await expect.poll(async () => (await eventsOf(site.id)).length).toBe(3);
    await page.click('#play');
    await expect.poll(async () => (await eventsOf(site.id)).length).toBe(4);
    await page.goBack();
    await expect.poll(async () => (await eventsOf(site.id)).length).toBe(5);

    const events = await eventsOf(site.id);
    const common = {
      user_agent: DESKTOP_CHROME,
      device_type: 'desktop',
      country: 'GB',
      session_id: events[0].session_id,
      visitor_id: events[0].visitor_id,
    };
    const campaign = { utm_source: 'newsletter', utm_medium: 'email', utm_campaign: 'spring' };
    const none = { utm_source: null, utm_medium: null, utm_campaign: null };
    expect(events).toEqual([
      {
        ...common,
        ...campaign,
        event_type: 'page_view',
        // The campaign tags are columns of their own; other query parameters never leave the page.
        page: '/landing',
        referrer: 'http://news.example.org/some/post',
        referrer_host: 'news.example.org',
        metadata: { screen: expect.stringMatching(/^\d+x\d+$/), loadTime: expect.any(Number) },
      },
      { ...common, ...none, event_type: 'page_view', page: '/pricing', referrer: null, referrer_host: null, metadata: { screen: expect.any(String) } },
      { ...common, ...none, event_type: 'click', page: '/pricing', referrer: null, referrer_host: null, metadata: { event: 'signup', plan: 'pro' } },
      { ...common, ...none, event_type: 'custom', page: '/pricing', referrer: null, referrer_host: null, metadata: { event: 'video-play', seconds: 12 } },
      { ...common, ...campaign, event_type: 'page_view', page: '/landing', referrer: null, referrer_host: null, metadata: { screen: expect.any(String) } },
    ]);
    expect(events[0].metadata.loadTime).toBeGreaterThan(0);
    expect(events[0].session_id).toMatch(/^[0-9a-f-]{36}$/);
    expect(await context.cookies()).toEqual([]);
    expect(pageErrors).toEqual([]);

    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}`, headers: { 'x-api-key': site.apiKey } });
    expect(summary.statusCode).toBe(200);
    expect(summary.json().data).toMatchObject({
      pageViews: 3,
      uniqueVisitors: 1,
      sessions: 1,
      topPages: [{ page: '/landing', views: 2 }, { page: '/pricing', views: 1 }],
      referrers: [{ source: 'news.example.org', count: 1 }],
      countries: [{ country: 'GB', visitors: 1 }],
      campaigns: {
        utmSource: [{ value: 'newsletter', visitors: 1 }],
        utmMedium: [{ value: 'email', visitors: 1 }],
        utmCampaign: [{ value: 'spring', visitors: 1 }],
      },
    });

    const realtime = await app.inject({ method: 'GET', url: '/api/analytics/realtime', headers: { 'x-api-key': site.apiKey } });
    expect(realtime.json().data).toMatchObject({ activeVisitors: 1, websites: [{ websiteId: site.id, activeVisitors: 1 }] });

    // The admin dashboard shows the visitor live, over its event stream.
    const adminContext = await browser.newContext({ extraHTTPHeaders: await legacyAdmin() });
    const dashboard = await adminContext.newPage();
    await dashboard.goto(`${api}/admin/status`);
    await expect.poll(() => dashboard.textContent('#connection')).toBe('live');
    await expect.poll(async () => Number(await dashboard.textContent('#live-visitors'))).toBeGreaterThanOrEqual(1);
    await expect
      .poll(() => dashboard.locator('#live-websites tr').allTextContents())
      .toContain('Tracked elsewhere1');
    await adminContext.close();
    await context.close();
  });

  it('a route rewritten before the load event still gives one page view with its load time', async () => {
    const hydrating = await createWebsite(app, 'Hydrating');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/hydrating?site=${hydrating.id}`, { waitUntil: 'load' });
    await expect.poll(async () => (await eventsOf(hydrating.id)).length, { timeout: 10_000 }).toBe(1);
    await page.waitForTimeout(500);
    const events = await eventsOf(hydrating.id);
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ event_type: 'page_view', page: '/hydrating' });
    // The image held the load back about 400 ms.
    expect(events[0].metadata.loadTime).toBeGreaterThanOrEqual(300);
    await context.close();
  });

  it('a page whose load never ends is counted all the same, without a load time, 10 s in', { timeout: 30_000 }, async () => {
    const stalled = await createWebsite(app, 'Stalled');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/stalled?site=${stalled.id}`, { waitUntil: 'domcontentloaded' });
    await expect.poll(async () => (await eventsOf(stalled.id)).length, { timeout: 15_000 }).toBe(1);
    const [event] = await eventsOf(stalled.id);
    expect(event).toMatchObject({ event_type: 'page_view', page: '/stalled' });
    expect(event.metadata.loadTime).toBeUndefined();
    await context.close();
  });

  it('records nothing when the browser sends Global Privacy Control', async () => {
    const quiet = await createWebsite(app, 'GPC');
    const context = await visitorContext();
    await context.addInitScript('Object.defineProperty(Navigator.prototype, "globalPrivacyControl", { get: () => true })');
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/?site=${quiet.id}`);
    await page.waitForFunction('typeof window.portfolioAnalytics?.track === "function"');
    await page.click('#play');
    await page.click('#signup');
    await page.waitForTimeout(1_000);
    expect(await eventsOf(quiet.id)).toEqual([]);
    await context.close();
  });

  it('records nothing under Do Not Track', async () => {
    const quiet = await createWebsite(app, 'DNT');
    const context = await visitorContext();
    await context.addInitScript('Object.defineProperty(Navigator.prototype, "doNotTrack", { get: () => "1" })');
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/?site=${quiet.id}`);
    await page.waitForFunction('typeof window.portfolioAnalytics?.track === "function"');
    await page.click('#play');
    await page.waitForTimeout(1_000);
    expect(await eventsOf(quiet.id)).toEqual([]);
    await context.close();
  });
});
