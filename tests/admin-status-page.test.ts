import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { BrowserContext, Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { SESSION_COOKIE } from '../src/modules/admin/status/routes.ts';
import { MAX_STREAMS_PER_ADMIN, STREAM_RETRY_MS } from '../src/modules/admin/status/stream.ts';
import { TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { servedInChromium } from './support/browser.ts';

// The dashboard page in Chromium where it used to fail its admin: a phone's
// width, more tabs than one admin may stream to, and a session that ends
// while the page is open. The stream re-checks its admin every 200 ms here,
// so an expired token is noticed within a second, not the default 30 s.

const RECHECK_MS = 200;

const served = servedInChromium(() => ({ ADMIN_STREAM_RECHECK_MS: String(RECHECK_MS) }));

async function openDashboard(page: Page): Promise<void> {
  expect((await page.goto(`${served.base}/admin/status`))?.status()).toBe(200);
  await expect.poll(() => page.textContent('#connection')).toBe('live');
}

/** A page signed in the way the sign-in form leaves it (the session cookie), collecting the page's own errors. */
async function cookieSignedInPage(expiresIn?: string): Promise<{ context: BrowserContext; page: Page; pageErrors: string[] }> {
  const context = await served.browser.newContext();
  const token = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, crypto.randomUUID(), expiresIn);
  await context.addCookies([{ name: SESSION_COOKIE, value: token, domain: '127.0.0.1', path: '/admin/status' }]);
  const page = await context.newPage();
  const pageErrors: string[] = [];
  page.on('pageerror', (error) => pageErrors.push(error.message));
  return { context, page, pageErrors };
}

describe('/admin/status page in Chromium', () => {
  it('fits a 375 and a 320 px wide screen without sideways scrolling', async () => {
    const context = await served.browser.newContext({ extraHTTPHeaders: await legacyAdmin(), viewport: { width: 1280, height: 800 } });
    const page = await context.newPage();
    await openDashboard(page);
    // Rows in the tables, so their widths count too.
    await expect.poll(() => page.locator('#slow-routes tr').count()).toBeGreaterThan(0);
    for (const width of [375, 320]) {
      await page.setViewportSize({ width, height: 800 });
      expect(await page.evaluate<number>('document.documentElement.scrollWidth'), `at ${width} px`).toBeLessThanOrEqual(width);
    }
    await context.close();
  });

  it(`with more than ${MAX_STREAMS_PER_ADMIN} tabs, the tab pushed out stops and says why; the others stay live`, async () => {
    const context = await served.browser.newContext({ extraHTTPHeaders: await legacyAdmin() });
    let streamsAsked = 0;
    context.on('request', (request) => {
      if (request.url().endsWith('/admin/status/stream')) streamsAsked += 1;
    });
    const tabs: Page[] = [];
    for (let i = 0; i <= MAX_STREAMS_PER_ADMIN; i += 1) {
      tabs.push(await context.newPage());
      await openDashboard(tabs[i]);
    }
    // A tab that reconnected after the retry would push the next-oldest out, and so on without end.
    await tabs[0].waitForTimeout(STREAM_RETRY_MS + 1_500);
    expect(streamsAsked).toBe(MAX_STREAMS_PER_ADMIN + 1);
    expect(await tabs[0].locator('#notice').innerText()).toBe('Opened in another tab — reload to watch here');
    for (const tab of tabs.slice(1)) expect(await tab.textContent('#connection')).toBe('live');
    await context.close();
  });

  it('behind a proxy, comes back by itself after the server was away (a 502 for its stream is no verdict)', async () => {
    // A reverse proxy answers 502 while the API restarts. EventSource gives up for good on any
    // answer that is not 200, so the page used to stop at "disconnected – reload" although
    // nothing was wrong with its session.
    let away = false;
    const proxied = new Set<http.ServerResponse>();
    const proxy = http.createServer((request, response) => {
      if (away) return void response.writeHead(502, { 'content-type': 'text/plain' }).end('Bad Gateway');
      const upstream = http.request(`${served.base}${request.url}`, { method: request.method, headers: request.headers }, (answer) => {
        response.writeHead(answer.statusCode!, answer.headers);
        answer.pipe(response);
      });
      proxied.add(response);
      response.on('close', () => {
        proxied.delete(response);
        upstream.destroy();
      });
      request.pipe(upstream);
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const context = await served.browser.newContext({ extraHTTPHeaders: await legacyAdmin() });
    try {
      const page = await context.newPage();
      expect((await page.goto(`http://127.0.0.1:${(proxy.address() as AddressInfo).port}/admin/status`))?.status()).toBe(200);
      await expect.poll(() => page.textContent('#connection')).toBe('live');
      // The server goes away: its stream is cut, and the proxy answers 502 meanwhile.
      away = true;
      for (const response of proxied) response.destroy();
      await page.waitForTimeout(STREAM_RETRY_MS + 2_000);
      expect(await page.textContent('#connection')).toBe('reconnecting…');
      expect(await page.locator('#notice').isHidden()).toBe(true);
      away = false;
      await expect.poll(() => page.textContent('#connection'), { timeout: 20_000 }).toBe('live');
      expect(await page.locator('body.stale').count()).toBe(0);
    } finally {
      await context.close();
      proxy.closeAllConnections();
      proxy.close();
    }
  });

  it('says when its session has ended, links to the sign-in, and marks the figures stale', async () => {
    const { context, page, pageErrors } = await cookieSignedInPage('1s');
    await openDashboard(page);
    expect(await page.locator('body.stale').count()).toBe(0);

    // The verifier allows 5 s of clock skew past exp; then the stream ends, and its reconnection is refused.
    await expect.poll(() => page.locator('body').innerText(), { timeout: 20_000 }).toContain('Your session has ended — sign in again');
    expect(await page.locator('body.stale').count()).toBe(1);
    await Promise.all([page.waitForEvent('load'), page.click('#notice a')]);
    expect(await page.locator('form#signin').count()).toBe(1);
    expect(pageErrors).toEqual([]);
    await context.close();
  });

  it('says when a sign-out did not go through (503), rather than reload into the sign-in form', async () => {
    const { context, page, pageErrors } = await cookieSignedInPage();
    // The server's answer when neither the auth server nor the database could end the session.
    await page.route('**/admin/status/session', (route) =>
      route.request().method() === 'DELETE'
        ? route.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ success: false, error: 'Service temporarily unavailable', statusCode: 503 }) })
        : route.continue(),
    );
    await openDashboard(page);
    await page.click('#signout');
    await expect.poll(() => page.locator('body').innerText()).toContain(
      'Not signed out: the server answered 503 Service temporarily unavailable — reload and sign out again',
    );
    expect(await page.locator('form#signin').count()).toBe(0);
    expect(await page.locator('body.stale').count()).toBe(1);
    expect(pageErrors).toEqual([]);
    await context.close();
  });

  it('says when a sign-out got no answer at all', async () => {
    const { context, page, pageErrors } = await cookieSignedInPage();
    await page.route('**/admin/status/session', (route) => (route.request().method() === 'DELETE' ? route.abort('connectionrefused') : route.continue()));
    await openDashboard(page);
    await page.click('#signout');
    await expect.poll(() => page.locator('body').innerText()).toContain('Not signed out: the server did not answer — reload and sign out again');
    expect(await page.locator('form#signin').count()).toBe(0);
    expect(pageErrors).toEqual([]);
    await context.close();
  });
});
