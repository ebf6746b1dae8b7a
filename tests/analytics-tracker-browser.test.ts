import { randomUUID } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Browser, BrowserContext, Page } from 'playwright-core';
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
// Then what real sites do to it: many pages, a visitor leaving early, the tag
// twice or with crossorigin, a hanging API, a strict CSP, bfcache, prerender,
// an idle tab. Most pages carry the tag docs/analytics.md gives site owners.
//
// The API trusts one proxy hop here (TRUST_PROXY=1), as behind a proxy; the browser sends
// a British address in it, so the country lookup has a public IP to read.

const BRITISH_IP = '81.2.69.160';
// Headless Chromium names itself HeadlessChrome, which bot detection drops.
const DESKTOP_CHROME = 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/147.0.0.0 Safari/537.36';

const sql = testSql();

/** Pages a test serves from the second origin: path → HTML and extra response headers. */
const extraPages = new Map<string, { html: string; headers?: Record<string, string> }>();

// The embed tag and the Content-Security-Policy that docs/analytics.md give a site owner, read from
// the doc itself: the pages below carry exactly what a site owner is told to write.
const analyticsDoc = await readFile(new URL('../docs/analytics.md', import.meta.url), 'utf8');
const DOCUMENTED_TAG = /```html\n(<script[^\n]*<\/script>)\n```/.exec(analyticsDoc)?.[1] ?? 'no embed tag in docs/analytics.md';
const DOCUMENTED_CSP = /^\s*Content-Security-Policy: (.+)$/m.exec(analyticsDoc)?.[1] ?? "connect-src 'none'";
const documentedTag = (api: string, websiteId: string) =>
  DOCUMENTED_TAG.replace('https://api.example.com', api).replace('WEBSITE-UUID', websiteId);

function sitePage(api: string, websiteId: string) {
  return `<!doctype html>
<html><head><title>Another site</title>
${documentedTag(api, websiteId)}
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
${documentedTag(api, websiteId)}
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
      if (url.pathname === '/never.gif' || url.pathname.startsWith('/hung/')) return;
      const extra = extraPages.get(url.pathname);
      if (extra) {
        response.writeHead(200, { 'content-type': 'text/html; charset=utf-8', ...extra.headers }).end(extra.html);
        return;
      }
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

  it('Safari on an iPad (a Mac user agent with a touch screen) is stored as a tablet; a Mac, a touch laptop, a phone are not', async () => {
    // Safari on iPadOS 13+ sends the Mac's user agent word for word; an iPad reports 5 touch points.
    const macSafari = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15';
    const windowsChrome = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/147.0.0.0 Safari/537.36';
    const androidChrome = 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/147.0.0.0 Mobile Safari/537.36';
    const visitors = [
      { label: 'iPad', userAgent: macSafari, touchPoints: 5, device: 'tablet', hint: true },
      { label: 'Mac', userAgent: macSafari, touchPoints: 0, device: 'desktop', hint: false },
      { label: 'Windows touch laptop', userAgent: windowsChrome, touchPoints: 10, device: 'desktop', hint: false },
      { label: 'Android phone', userAgent: androidChrome, touchPoints: 5, device: 'mobile', hint: false },
    ];
    for (const visitor of visitors) {
      const devices = await createWebsite(app, `Device ${visitor.label}`);
      // hasTouch alone gives maxTouchPoints 1 in Chromium: the count is set as the device reports it.
      const context = await browser.newContext({ userAgent: visitor.userAgent, hasTouch: visitor.touchPoints > 0 });
      await context.addInitScript(`Object.defineProperty(Navigator.prototype, "maxTouchPoints", { get: () => ${visitor.touchPoints} })`);
      // What the tracker sends, read as it goes out (Chromium shows a beacon's Blob body to no request listener).
      await context.addInitScript(`window.sentBeacons = [];
        const sendBeacon = Navigator.prototype.sendBeacon;
        Navigator.prototype.sendBeacon = function (url, data) { data.text().then((body) => window.sentBeacons.push(body)); return sendBeacon.call(this, url, data); };`);
      const page = await context.newPage();
      await page.goto(`${siteOrigin}/?site=${devices.id}`);
      await expect.poll(async () => (await eventsOf(devices.id)).length, { timeout: 10_000 }).toBe(1);
      const [stored] = await eventsOf(devices.id);
      expect({ label: visitor.label, user_agent: stored.user_agent, device_type: stored.device_type }).toEqual({
        label: visitor.label,
        user_agent: visitor.userAgent,
        device_type: visitor.device,
      });
      // The hint goes out with the iPad's events only: no other browser says more than its user agent.
      await expect.poll(() => page.evaluate('window.sentBeacons.length'), { message: visitor.label }).toBe(1);
      const sent = (await page.evaluate('window.sentBeacons')) as string[];
      expect(JSON.parse(sent[0]).touchScreen, visitor.label).toBe(visitor.hint ? true : undefined);
      await context.close();
    }
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

  /** A page of the second origin carrying `head` (the tag, say) and `body`; returns its URL. */
  function servePage(path: string, head: string, body = '', headers?: Record<string, string>) {
    extraPages.set(path, { html: `<!doctype html>\n<html><head><title>${path}</title>\n${head}\n</head><body>\n${body}\n</body></html>`, headers });
    return `${siteOrigin}${path}`;
  }

  /** Console warnings and uncaught errors of a page (DEBUG_TRACKER=1 prints its whole console). */
  function watch(page: Page) {
    const seen = { warnings: [] as string[], errors: [] as string[] };
    page.on('console', (message) => void (message.type() === 'warning' && seen.warnings.push(message.text())));
    page.on('pageerror', (error) => void seen.errors.push(error.message));
    if (process.env.DEBUG_TRACKER) page.on('console', (message) => console.log('console', message.type(), message.text()));
    return seen;
  }

  const settle = (ms = 1_000) => new Promise((resolve) => setTimeout(resolve, ms));

  it('a page reached from a page of the same site carries no referrer: the site is not its own source', async () => {
    const multi = await createWebsite(app, 'Multi-page');
    const first = servePage('/mp/one', documentedTag(api, multi.id), '<a id="next" href="/mp/two">Two</a>');
    servePage('/mp/two', documentedTag(api, multi.id), 'Two');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(first, { referer: 'http://news.example.org/post' });
    await expect.poll(async () => (await eventsOf(multi.id)).length, { timeout: 10_000 }).toBe(1);
    await page.click('#next');
    await expect.poll(async () => (await eventsOf(multi.id)).length, { timeout: 10_000 }).toBe(2);
    expect((await eventsOf(multi.id)).map((event) => [event.page, event.referrer])).toEqual([
      ['/mp/one', 'http://news.example.org/post'],
      ['/mp/two', null],
    ]);
    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${multi.id}`, headers: { 'x-api-key': multi.apiKey } });
    expect(summary.json().data.referrers).toEqual([{ source: 'news.example.org', count: 1 }]);
    await context.close();
  });

  it("a reload or a return through history does not count the visit's source again; a new arrival from another site does", async () => {
    const returning = await createWebsite(app, 'Returning');
    const first = servePage('/rt/one', documentedTag(api, returning.id), '<a id="next" href="/rt/two">Two</a>');
    servePage('/rt/two', documentedTag(api, returning.id), 'Two');
    const context = await visitorContext();
    const page = await context.newPage();
    const stored = async (count: number) => {
      await expect.poll(async () => (await eventsOf(returning.id)).length, { timeout: 10_000 }).toBe(count);
      return (await eventsOf(returning.id)).map((event) => [event.page, event.referrer]);
    };
    await page.goto(first, { referer: 'http://news.example.org/post' });
    await stored(1);
    await page.reload();
    await stored(2);
    await page.click('#next');
    await stored(3);
    // Playwright's Chromium keeps no back/forward cache: the page loads again, document.referrer as it was.
    await page.goBack();
    await stored(4);
    await page.goto(first, { referer: 'https://social.example.com/share' });
    expect(await stored(5)).toEqual([
      ['/rt/one', 'http://news.example.org/post'],
      ['/rt/one', null],
      ['/rt/two', null],
      ['/rt/one', null],
      ['/rt/one', 'https://social.example.com/share'],
    ]);
    expect(new Set((await eventsOf(returning.id)).map((event) => event.session_id)).size).toBe(1);
    const summary = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${returning.id}`, headers: { 'x-api-key': returning.apiKey } });
    expect(summary.json().data.referrers).toEqual([
      { source: 'news.example.org', count: 1 },
      { source: 'social.example.com', count: 1 },
    ]);
    await context.close();
  });

  it('a visitor who leaves before the load event is still counted, without a load time', async () => {
    const leaving = await createWebsite(app, 'Left early');
    const url = servePage('/leaving', documentedTag(api, leaving.id), '<img src="/never.gif" alt="">');
    const context = await visitorContext();
    const page = await context.newPage();
    watch(page);
    await page.goto(url, { waitUntil: 'domcontentloaded' });
    await page.waitForFunction('typeof window.portfolioAnalytics?.track === "function"');
    await page.goto('about:blank');
    await expect.poll(async () => (await eventsOf(leaving.id)).length, { timeout: 5_000 }).toBe(1);
    const [event] = await eventsOf(leaving.id);
    expect(event).toMatchObject({ event_type: 'page_view', page: '/leaving' });
    expect(event.metadata.loadTime).toBeUndefined();
    await context.close();
  });

  it('the tag twice on a page (a layout and a page both carry it) counts everything once', async () => {
    const twice = await createWebsite(app, 'Twice');
    const url = servePage(
      '/twice',
      `${documentedTag(api, twice.id)}\n<script async src="${api}/script.js" data-website-id="${twice.id}"></script>`,
      '<button id="signup" data-event="signup">Sign up</button>',
    );
    const context = await visitorContext();
    const page = await context.newPage();
    const seen = watch(page);
    await page.goto(url);
    await expect.poll(async () => (await eventsOf(twice.id)).length, { timeout: 10_000 }).toBe(1);
    await page.click('#signup');
    await page.evaluate('history.pushState({}, "", "/twice/next")');
    await page.evaluate('window.portfolioAnalytics.track("played")');
    await expect.poll(async () => (await eventsOf(twice.id)).length).toBeGreaterThanOrEqual(4);
    await settle();
    // Each once; the last two are sent together and may arrive in either order.
    expect((await eventsOf(twice.id)).map((event) => `${event.event_type} ${event.page}`).sort()).toEqual(
      ['page_view /twice', 'click /twice', 'page_view /twice/next', 'custom /twice/next'].sort(),
    );
    expect(seen.errors).toEqual([]);
    await context.close();
  });

  it('campaign tags of the landing URL are kept when the router rewrites the URL before the load event', async () => {
    const cleaned = await createWebsite(app, 'Cleaned URL');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/hydrating?site=${cleaned.id}&utm_source=ads&utm_medium=cpc&utm_campaign=launch&email=a%40b.c`);
    await expect.poll(async () => (await eventsOf(cleaned.id)).length, { timeout: 10_000 }).toBe(1);
    expect(await page.evaluate('location.search')).toBe('');
    expect((await eventsOf(cleaned.id))[0]).toMatchObject({
      event_type: 'page_view',
      page: '/hydrating',
      utm_source: 'ads',
      utm_medium: 'cpc',
      utm_campaign: 'launch',
    });
    await context.close();
  });

  it('a page that tidies the campaign tags out of its URL after the load event is not counted twice', async () => {
    const tidied = await createWebsite(app, 'Tidied URL');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/offer?site=${tidied.id}&utm_source=ads`);
    await expect.poll(async () => (await eventsOf(tidied.id)).length, { timeout: 10_000 }).toBe(1);
    await page.evaluate('history.replaceState(history.state, "", location.pathname)');
    await settle();
    expect((await eventsOf(tidied.id)).map((event) => [event.event_type, event.page, event.utm_source])).toEqual([['page_view', '/offer', 'ads']]);
    await context.close();
  });

  it('track() never throws into the page, whatever props it is given', async () => {
    const odd = await createWebsite(app, 'Odd props');
    const context = await visitorContext();
    const page = await context.newPage();
    const seen = watch(page);
    await page.goto(`${siteOrigin}/?site=${odd.id}`);
    await page.waitForFunction('typeof window.portfolioAnalytics?.track === "function"');
    const thrown = await page.evaluate(`(() => {
      const cyclic = {}; cyclic.self = cyclic;
      const thrown = [];
      for (const props of [cyclic, { big: BigInt(10) }]) {
        try { window.portfolioAnalytics.track('odd', props); } catch (error) { thrown.push(String(error)); }
      }
      window.portfolioAnalytics.track('after', { ok: true });
      return thrown;
    })()`);
    expect(thrown).toEqual([]);
    await expect.poll(async () => (await eventsOf(odd.id)).filter((event) => event.metadata.event === 'after').length).toBe(1);
    expect(seen.errors).toEqual([]);
    await context.close();
  });

  it('a data-host-url that is no http(s) URL throws nothing into the page', async () => {
    const odd = await createWebsite(app, 'Bad host');
    const context = await visitorContext();
    const page = await context.newPage();
    const seen = watch(page);
    const badHost = servePage(
      '/bad-host',
      `<script async src="${api}/script.js" data-website-id="${odd.id}" data-host-url="ftp://analytics.example.org"></script>`,
      '<button id="signup" data-event="signup">Sign up</button>',
    );
    await page.goto(badHost);
    await page.waitForLoadState('load');
    await page.click('#signup');
    await settle();
    expect(seen.errors).toEqual([]);
    await context.close();
  });

  it('a tag with crossorigin="anonymous" (frameworks add it to every script) still loads and tracks', async () => {
    const cors = await createWebsite(app, 'Crossorigin');
    const url = servePage('/crossorigin', `<script async crossorigin="anonymous" src="${api}/script.js" data-website-id="${cors.id}"></script>`);
    // No extra request headers here: Playwright adds them to CORS requests too, which then need a preflight no browser sends.
    const context = await browser.newContext({ userAgent: DESKTOP_CHROME });
    const page = await context.newPage();
    watch(page);
    await page.goto(url);
    await expect.poll(async () => (await eventsOf(cors.id)).length, { timeout: 10_000 }).toBe(1);
    await context.close();
  });

  it('loaded as type="module" it throws nothing and says in the console how to load it', async () => {
    const moduleSite = await createWebsite(app, 'Module');
    const url = servePage('/module', `<script type="module" src="${api}/script.js" data-website-id="${moduleSite.id}"></script>`);
    const context = await browser.newContext({ userAgent: DESKTOP_CHROME });
    const page = await context.newPage();
    const seen = watch(page);
    await page.goto(url);
    await expect.poll(() => seen.warnings.join('\n')).toContain('type="module"');
    expect(seen.errors).toEqual([]);
    await context.close();
  });

  it('the documented tag does not hold the page back when the API hangs', async () => {
    const url = servePage(
      '/hung-api',
      `${documentedTag(`${siteOrigin}/hung`, randomUUID())}\n<script>document.addEventListener('DOMContentLoaded', function () { window.readyAt = performance.now(); });</script>`,
      'Content',
    );
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(url, { waitUntil: 'commit' });
    // The page's own DOMContentLoaded handlers run at once, though the script never arrives.
    await page.waitForFunction('window.readyAt !== undefined', undefined, { timeout: 3_000 });
    await context.close();
  });

  it('a page restored from the back/forward cache is a page view again', async () => {
    const restored = await createWebsite(app, 'Restored');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/?site=${restored.id}`);
    await expect.poll(async () => (await eventsOf(restored.id)).length, { timeout: 10_000 }).toBe(1);
    // Playwright's Chromium has the cache off (and headless cannot turn it on): the event a browser
    // fires on a restore, as it fires it.
    await page.evaluate('dispatchEvent(new PageTransitionEvent("pageshow", { persisted: true }))');
    await expect.poll(async () => (await eventsOf(restored.id)).length).toBe(2);
    await page.evaluate('dispatchEvent(new PageTransitionEvent("pageshow", { persisted: false }))');
    await settle(500);
    expect((await eventsOf(restored.id)).map((event) => [event.event_type, event.page])).toEqual([
      ['page_view', '/'],
      ['page_view', '/'],
    ]);
    await context.close();
  });

  it('a prerendered page is counted when it is shown, not when it is prerendered', async () => {
    const prerendered = await createWebsite(app, 'Prerendered');
    const context = await visitorContext();
    // Headless Chromium does not prerender: the document says it is prerendering until activate() is called.
    await context.addInitScript(`(() => {
      let prerendering = true;
      Object.defineProperty(Document.prototype, 'prerendering', { configurable: true, get: () => prerendering });
      window.activate = () => { prerendering = false; document.dispatchEvent(new Event('prerenderingchange')); };
    })()`);
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/?site=${prerendered.id}`, { waitUntil: 'load' });
    await page.waitForFunction('typeof window.portfolioAnalytics?.track === "function"');
    await settle(1_500);
    expect(await eventsOf(prerendered.id)).toEqual([]);
    await page.evaluate('window.activate()');
    await expect.poll(async () => (await eventsOf(prerendered.id)).length, { timeout: 5_000 }).toBe(1);
    expect((await eventsOf(prerendered.id))[0]).toMatchObject({ event_type: 'page_view', page: '/' });
    await context.close();
  });

  it('a session ends after 30 minutes without an event: a tab left open is a new session when it is used again', async () => {
    const idle = await createWebsite(app, 'Idle tab');
    const context = await visitorContext();
    await context.clock.install();
    const page = await context.newPage();
    await page.goto(`${siteOrigin}/?site=${idle.id}`);
    await expect.poll(async () => (await eventsOf(idle.id)).length, { timeout: 10_000 }).toBe(1);
    await page.clock.fastForward('29:00');
    await page.evaluate('history.pushState({}, "", "/soon")');
    await expect.poll(async () => (await eventsOf(idle.id)).length).toBe(2);
    await page.clock.fastForward('31:00');
    await page.evaluate('history.pushState({}, "", "/later")');
    await expect.poll(async () => (await eventsOf(idle.id)).length).toBe(3);
    await page.evaluate('window.portfolioAnalytics.track("again")');
    await expect.poll(async () => (await eventsOf(idle.id)).length).toBe(4);
    const sessions = (await eventsOf(idle.id)).map((event) => event.session_id);
    expect(sessions[1]).toBe(sessions[0]);
    expect(sessions[2]).not.toBe(sessions[1]);
    expect(sessions[3]).toBe(sessions[2]);
    await context.close();
  });

  it('a website id pasted with spaces around it is still recorded; a missing one is said in the console', async () => {
    const padded = await createWebsite(app, 'Padded id');
    const paddedUrl = servePage('/padded', `<script async src="${api}/script.js" data-website-id=" ${padded.id}\n"></script>`);
    const missingUrl = servePage('/missing-id', `<script async src="${api}/script.js"></script>`);
    const context = await visitorContext();
    const page = await context.newPage();
    const seen = watch(page);
    await page.goto(paddedUrl);
    await expect.poll(async () => (await eventsOf(padded.id)).length, { timeout: 10_000 }).toBe(1);
    await page.goto(missingUrl);
    await expect.poll(() => seen.warnings.join('\n')).toContain('data-website-id');
    expect(seen.errors).toEqual([]);
    await context.close();
  });

  it('a page whose Content-Security-Policy allows what the docs say is tracked', async () => {
    const strict = await createWebsite(app, 'Strict CSP');
    const csp = `default-src 'none'; ${DOCUMENTED_CSP.replaceAll('https://api.example.com', api)}`;
    const url = servePage('/csp', documentedTag(api, strict.id), '<button id="signup" data-event="signup">Sign up</button>', { 'content-security-policy': csp });
    const context = await visitorContext();
    const page = await context.newPage();
    const seen = watch(page);
    await page.goto(url);
    await expect.poll(async () => (await eventsOf(strict.id)).length, { timeout: 10_000 }).toBe(1);
    await page.click('#signup');
    await expect.poll(async () => (await eventsOf(strict.id)).length).toBe(2);
    expect(seen.errors).toEqual([]);
    await context.close();
  });

  it('an in-page anchor is no page view; a tracked link or form that leaves the page still reports', async () => {
    const leaving = await createWebsite(app, 'Links');
    const url = servePage(
      '/links',
      documentedTag(api, leaving.id),
      `<a id="jump" href="#details">Details</a><p id="details">…</p>
<a id="out" data-event="outbound" href="/elsewhere">Elsewhere</a>
<form id="form" data-event="subscribe" action="/elsewhere"><button id="send">Send</button></form>`,
    );
    servePage('/elsewhere', '', 'Not tracked');
    const context = await visitorContext();
    const page = await context.newPage();
    await page.goto(url);
    await expect.poll(async () => (await eventsOf(leaving.id)).length, { timeout: 10_000 }).toBe(1);
    await page.click('#jump');
    await page.goBack();
    await page.click('#out');
    await page.waitForURL('**/elsewhere');
    await expect.poll(async () => (await eventsOf(leaving.id)).length).toBe(2);
    await page.goto(url);
    await expect.poll(async () => (await eventsOf(leaving.id)).length, { timeout: 10_000 }).toBe(3);
    await page.click('#send');
    await page.waitForURL('**/elsewhere?');
    await expect.poll(async () => (await eventsOf(leaving.id)).length).toBe(4);
    await settle(500);
    expect((await eventsOf(leaving.id)).map((event) => [event.event_type, event.page, event.metadata.event ?? null])).toEqual([
      ['page_view', '/links', null],
      ['click', '/links', 'outbound'],
      ['page_view', '/links', null],
      ['form_submit', '/links', 'subscribe'],
    ]);
    await context.close();
  });
});
