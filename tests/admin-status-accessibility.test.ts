import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Page } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { legacyAdmin } from './support/admin-auth.ts';
import { servedInChromium } from './support/browser.ts';

// The dashboard's two pages checked by axe-core, the accessibility engine
// browsers' own audits use, against WCAG 2.1 A and AA: an admin on a screen
// reader or a keyboard reads the figures and signs in as anyone does.

const AXE_SOURCE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

type Violation = { rule: string; impact: string; help: string; elements: string[] };

/** axe-core's violations on the page as it stands, each with the elements it names. */
function violationsOn(page: Page): Promise<Violation[]> {
  // Evaluated through the DevTools protocol, which the page's CSP (script-src 'self') does not govern.
  return page.evaluate<Violation[]>(`${AXE_SOURCE};
    axe
      .run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] }, resultTypes: ['violations'] })
      .then((results) => results.violations.map(({ id, impact, help, nodes }) => ({ rule: id, impact, help, elements: nodes.map(({ target }) => target.join(' ')) })))`);
}

const served = servedInChromium();

describe('/admin/status under axe-core (WCAG 2.1 A and AA)', () => {
  it('the sign-in page has no violations, and none after a refused sign-in', async () => {
    const context = await served.browser.newContext();
    const page = await context.newPage();
    // Signed out, the page is the sign-in form, answered 401.
    expect((await page.goto(`${served.base}/admin/status`))?.status()).toBe(401);
    await expect.poll(() => page.locator('form#signin').count()).toBe(1);
    expect(await violationsOn(page)).toEqual([]);
    // The refusal's notice is part of the page too (no auth server here: it says so).
    await page.fill('#email', 'nobody@example.test');
    await page.fill('#password', 'wrong password');
    await page.click('button[type=submit]');
    await expect.poll(() => page.locator('#error').isVisible()).toBe(true);
    expect(await violationsOn(page)).toEqual([]);
    await context.close();
  });

  it('the dashboard, live with its figures, has no violations', async () => {
    const context = await served.browser.newContext({ extraHTTPHeaders: await legacyAdmin() });
    const page = await context.newPage();
    expect((await page.goto(`${served.base}/admin/status`))?.status()).toBe(200);
    await expect.poll(() => page.textContent('#connection')).toBe('live');
    await expect.poll(() => page.locator('#slow-routes tr').count()).toBeGreaterThan(0);
    expect(await violationsOn(page)).toEqual([]);
    await context.close();
  });
});
