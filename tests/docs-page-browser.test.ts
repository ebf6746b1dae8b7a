import type { FastifyInstance } from 'fastify';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { launchChromium } from './support/browser.ts';

// The /docs explorer in Chromium, under the page's own Content-Security-Policy
// (plugins/openapi.ts): it renders the operations and logs nothing to the
// console. Its top bar's logo writes an inline <style>, which the policy
// refused with a console error on every visit until it was allowed by hash.

let browser: Browser;
beforeAll(async () => {
  browser = await launchChromium();
});
afterAll(async () => browser?.close());

describe.each(['test', 'production'] as const)('/docs in Chromium, NODE_ENV=%s', (NODE_ENV) => {
  let app: FastifyInstance;
  let base: string;
  beforeAll(async () => {
    app = await buildTestApp({ NODE_ENV });
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  });
  afterAll(async () => app?.close());

  it('renders the operations and logs no console error, no CSP violation', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('console', (message) => {
      if (message.type() === 'error' || message.type() === 'warning') problems.push(`${message.type()}: ${message.text()}`);
    });
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    // The console message is Chromium's; the event says which directive refused what.
    await page.addInitScript(
      "document.addEventListener('securitypolicyviolation', (event) => console.error('CSP violation: ' + event.effectiveDirective + ' ' + event.blockedURI))",
    );
    try {
      expect((await page.goto(`${base}/docs`))?.status()).toBe(200);
      await expect.poll(() => page.locator('.opblock').count(), { timeout: 15_000 }).toBeGreaterThan(40);
      // The logo's <style> is written as the top bar first renders, before the operations; the
      // plugin's own logo then takes its place. Both happened by now.
      await expect.poll(() => page.locator('.topbar-wrapper img').count()).toBe(1);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
