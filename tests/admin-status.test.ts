import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import type { ConsoleMessage } from 'playwright-core';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { SESSION_COOKIE, sessionCookieOptions } from '../src/modules/admin/status/routes.ts';
import { buildTestApp, testConfig } from './support/app.ts';
import { expectRefused, legacyAdmin } from './support/admin-auth.ts';
import { servedInChromium } from './support/browser.ts';
import { realAuth, realAuthEnv, signUp } from './support/real-auth.ts';

// The /admin/status dashboard: its HTTP contract through inject, then the
// page itself in Chromium (the npm package's build) driven by playwright-core
// against the app listening on a real port. Screenshots go to .artifacts/
// (git-ignored).

const ARTIFACTS = path.resolve(import.meta.dirname, '../.artifacts');

describe('/admin/status over HTTP', () => {
  let app: FastifyInstance;
  let admin: { authorization: string };
  beforeAll(async () => {
    app = await buildTestApp();
    admin = await legacyAdmin();
  });
  afterAll(async () => app.close());

  it('answers 401 with the sign-in form without credentials, and the dashboard with them', async () => {
    for (const headers of [{}, { authorization: 'Bearer garbage' }, { cookie: `${SESSION_COOKIE}=garbage` }]) {
      const refused = await app.inject({ method: 'GET', url: '/admin/status', headers });
      expect(refused.statusCode).toBe(401);
      expect(refused.headers['content-type']).toBe('text/html; charset=utf-8');
      expect(refused.body).toContain('<form id="signin"');
      expect(refused.body).toContain('Sign in with an administrator account.');
    }
    const page = await app.inject({ method: 'GET', url: '/admin/status', headers: admin });
    expect(page.statusCode).toBe(200);
    expect(page.body).toContain('<script type="module" src="/admin/status/assets/app.js"></script>');
    // The cookie carries the same kind of token the header does.
    const token = admin.authorization.replace('Bearer ', '');
    expect((await app.inject({ method: 'GET', url: '/admin/status/', headers: { cookie: `${SESSION_COOKIE}=${token}` } })).statusCode).toBe(200);
  });

  it("takes no calls from other origins, the front end's included: no CORS headers, and its preflights refused", async () => {
    const origin = testConfig().CORS_ORIGIN;
    const token = admin.authorization.replace('Bearer ', '');
    // A page of the front end's origin on the API's site gets the SameSite=Strict cookie sent along;
    // without CORS headers its script cannot read the answer.
    for (const url of ['/admin/status/session', '/admin/status']) {
      const read = await app.inject({ method: 'GET', url, headers: { origin, cookie: `${SESSION_COOKIE}=${token}` } });
      expect([read.statusCode, read.headers['access-control-allow-origin'], read.headers['access-control-allow-credentials']]).toEqual([200, undefined, undefined]);
    }
    // Nor may it send what needs a preflight (signing the admin out, signing in).
    for (const [url, method] of [['/admin/status/session', 'DELETE'], ['/admin/status/session', 'POST'], ['/admin/status', 'GET']]) {
      const preflight = await app.inject({ method: 'OPTIONS', url, headers: { origin, 'access-control-request-method': method } });
      expect([preflight.statusCode, preflight.headers['access-control-allow-origin']]).toEqual([403, undefined]);
      expect(preflight.json()).toEqual({ success: false, error: 'The status dashboard takes no calls from other origins', statusCode: 403 });
    }
    // The API itself still answers the front end's origin.
    const api = await app.inject({ method: 'OPTIONS', url: '/api/auth/me', headers: { origin, 'access-control-request-method': 'GET' } });
    expect([api.statusCode, api.headers['access-control-allow-origin']]).toEqual([204, origin]);
  });

  it('takes the cookie when the Authorization header carries no Bearer token (basic auth at a proxy in front)', async () => {
    // A proxy that guards /admin with HTTP basic auth makes the browser send
    // `Authorization: Basic …` with every request; the cookie was then ignored, and
    // signing in led back to the sign-in form for ever.
    const token = admin.authorization.replace('Bearer ', '');
    const headers = { authorization: `Basic ${Buffer.from('ops:secret').toString('base64')}`, cookie: `${SESSION_COOKIE}=${token}` };
    expect((await app.inject({ method: 'GET', url: '/admin/status', headers })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: '/admin/status/session', headers })).statusCode).toBe(200);
    // A Bearer header is still the credential when there is one: a bad one is not rescued by the cookie.
    const bearer = await app.inject({ method: 'GET', url: '/admin/status/session', headers: { authorization: 'Bearer garbage', cookie: `${SESSION_COOKIE}=${token}` } });
    expect(bearer.statusCode).toBe(401);
  });

  it('needs no unsafe CSP: no inline script or style, helmet policy untouched', async () => {
    for (const response of [
      await app.inject({ method: 'GET', url: '/admin/status', headers: admin }),
      await app.inject({ method: 'GET', url: '/admin/status' }),
    ]) {
      const csp = String(response.headers['content-security-policy']);
      expect(csp).toContain("script-src 'self'");
      expect(csp).toContain("script-src-attr 'none'");
      expect(/script-src[^;]*unsafe/.test(csp)).toBe(false);
      expect(response.body).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
      expect(response.body).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
    }
  });

  it('serves only its own assets', async () => {
    const script = await app.inject({ method: 'GET', url: '/admin/status/assets/app.js' });
    expect(script.statusCode).toBe(200);
    expect(script.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect((await app.inject({ method: 'GET', url: '/admin/status/assets/style.css' })).headers['content-type']).toBe('text/css; charset=utf-8');
    const strangers = ['routes.ts', '..%2Froutes.ts', 'index.html'];
    // Names every plain object answers to.
    const inherited = ['constructor', 'toString', '__proto__', 'hasOwnProperty', 'valueOf'];
    for (const file of [...strangers, ...inherited]) {
      expect.soft((await app.inject({ method: 'GET', url: `/admin/status/assets/${file}` })).statusCode, file).toBe(404);
    }
  });

  it('tells the page whether its credentials still open the dashboard (GET /admin/status/session)', async () => {
    await expectRefused(app, { method: 'GET', url: '/admin/status/session' });
    const token = admin.authorization.replace('Bearer ', '');
    for (const headers of [admin, { cookie: `${SESSION_COOKIE}=${token}` }]) {
      const response = await app.inject({ method: 'GET', url: '/admin/status/session', headers });
      expect(response.statusCode).toBe(200);
      expect(response.json()).toEqual({ success: true, message: 'Signed in' });
    }
  });

  it('refuses the stream without credentials', async () => {
    const response = await app.inject({ method: 'GET', url: '/admin/status/stream' });
    expect(response.statusCode).toBe(401);
    expect(response.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
  });

  it('streams snapshots over real HTTP, and an open stream does not hold up closing the app', async () => {
    const listening = await buildTestApp();
    const base = await listening.listen({ host: '127.0.0.1', port: 0 });
    const response = await fetch(`${base}/admin/status/stream`, { headers: admin });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toBe('text/event-stream; charset=utf-8');
    const reader = response.body!.getReader();
    let text = '';
    while (!text.includes('event: snapshot')) text += new TextDecoder().decode((await reader.read()).value);
    expect(text).toContain('event: history');
    const data = JSON.parse(/event: snapshot\ndata: (.*)\n/.exec(text)![1]);
    expect(Object.keys(data).sort()).toEqual(['health', 'live', 'metrics', 'sample']);
    expect(data.health.database.status).toBe('up');
    const started = Date.now();
    await listening.close();
    expect(Date.now() - started).toBeLessThan(3_000);
    await reader.cancel().catch(() => {});
  });

  it('keeps streaming while the database is down, and shows it down', async () => {
    // Nothing listens on port 1. The legacy admin token needs no database, so the stream opens;
    // the live-visitor count cannot be read, and once that held back every snapshot, the
    // dashboard kept the last figures it had (database "up") through the whole outage.
    const unreachable = await buildTestApp({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' });
    const base = await unreachable.listen({ host: '127.0.0.1', port: 0 });
    const controller = new AbortController();
    try {
      const response = await fetch(`${base}/admin/status/stream`, { headers: admin, signal: controller.signal });
      expect(response.status).toBe(200);
      const reader = response.body!.getReader();
      let text = '';
      const deadline = Date.now() + 8_000;
      while (!text.includes('event: snapshot') && Date.now() < deadline) {
        const timeout = new Promise<undefined>((resolve) => setTimeout(() => resolve(undefined), Math.max(0, deadline - Date.now())));
        const chunk = await Promise.race([reader.read().then(({ value }) => value), timeout]);
        if (chunk) text += new TextDecoder().decode(chunk);
      }
      const snapshot = /event: snapshot\ndata: (.*)\n/.exec(text);
      expect(snapshot, 'a snapshot within 8 s').not.toBeNull();
      const data = JSON.parse(snapshot![1]);
      expect(data.health.database.status).toBe('down');
      expect(data.health.status).toBe('error');
      expect(data.live).toBeNull();
      expect(data.metrics.requests.total).toEqual(expect.any(Number));
    } finally {
      controller.abort();
      unreachable.server.closeAllConnections();
      await unreachable.close();
    }
  });

  it('signs in through the accounts service: 503 while none is configured, 400 for an empty form', async () => {
    const unconfigured = await app.inject({ method: 'POST', url: '/admin/status/session', payload: { email: 'a@example.test', password: 'secret1' } });
    expect(unconfigured.statusCode).toBe(503);
    expect(unconfigured.json().error).toBe('Authentication service unavailable');
    expect(unconfigured.headers['set-cookie']).toBeUndefined();
    expect((await app.inject({ method: 'POST', url: '/admin/status/session', payload: {} })).statusCode).toBe(400);
  });

  it('signs out by clearing the HttpOnly, SameSite=Strict cookie (Secure in production)', async () => {
    const response = await app.inject({ method: 'DELETE', url: '/admin/status/session' });
    expect(response.statusCode).toBe(200);
    const cookie = String(response.headers['set-cookie']);
    expect(cookie).toMatch(new RegExp(`^${SESSION_COOKIE}=;`));
    expect(cookie).toContain('HttpOnly');
    expect(cookie).toContain('SameSite=Strict');
    expect(cookie).toContain('Path=/admin/status');
    expect(sessionCookieOptions(testConfig({ NODE_ENV: 'production' }), 3600)).toEqual({
      httpOnly: true,
      sameSite: 'strict',
      secure: true,
      path: '/admin/status',
      maxAge: 3600,
    });
    expect(sessionCookieOptions(testConfig()).secure).toBe(false);
  });
});

describe('/admin/status in Chromium', () => {
  const served = servedInChromium();
  beforeAll(async () => {
    await mkdir(ARTIFACTS, { recursive: true });
  });

  const readNumber = (text: string | null) => Number((text ?? '').replace(/[^\d.]/g, ''));

  it('shows live figures that move while requests are made, without console errors', async () => {
    const context = await served.browser.newContext({ extraHTTPHeaders: await legacyAdmin(), viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('console', (message: ConsoleMessage) => {
      if (message.type() === 'error' || message.type() === 'warning') problems.push(`${message.type()}: ${message.text()}`);
    });
    page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
    page.on('response', (answer) => {
      if (answer.status() >= 400) problems.push(`${answer.status()}: ${answer.url()}`);
    });
    page.on('requestfailed', (request) => {
      // The stream is cut when the page closes; anything else failing is a problem.
      if (!request.url().endsWith('/admin/status/stream')) problems.push(`requestfailed: ${request.url()}`);
    });

    const response = await page.goto(`${served.base}/admin/status`);
    expect(response?.status()).toBe(200);
    await expect.poll(() => page.textContent('#connection')).toBe('live');
    await expect.poll(() => page.textContent('#total-requests')).toMatch(/\d/);
    const before = readNumber(await page.textContent('#total-requests'));

    for (let i = 0; i < 30; i += 1) await fetch(`${served.base}/health`);
    for (let i = 0; i < 3; i += 1) await fetch(`${served.base}/no-such-page`);
    await expect.poll(async () => readNumber(await page.textContent('#total-requests')), { timeout: 5_000 }).toBeGreaterThanOrEqual(before + 33);
    expect(readNumber(await page.textContent('#rps'))).toBeGreaterThan(0);
    expect(readNumber(await page.textContent('#p99'))).toBeGreaterThan(0);
    expect(readNumber(await page.textContent('#rss'))).toBeGreaterThan(0);
    expect(await page.textContent('#uptime')).toMatch(/\d+ s/);
    expect(await page.textContent('#db-status')).toBe('up');
    expect(await page.textContent('#auth-status')).toBe('not configured');
    expect(await page.textContent('#ratelimit-status')).toBe('not configured');
    await expect.poll(() => page.locator('#status-codes td.code').allTextContents()).toEqual(expect.arrayContaining(['200', '404']));
    expect(await page.locator('#slow-routes td.route').allTextContents()).toContain('GET /health');

    // Charts get a point per second; wait for a few and check that something was drawn.
    await page.waitForTimeout(2_500);
    // Runs in the page (a string: this project's TypeScript has no DOM types).
    const inked = await page.evaluate<number>(`(() => {
      const canvas = document.getElementById('chart-rps');
      const { data } = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height);
      let painted = 0;
      for (let i = 3; i < data.length; i += 4) if (data[i] > 0) painted += 1;
      return painted;
    })()`);
    expect(inked).toBeGreaterThan(500);

    await page.screenshot({ path: path.join(ARTIFACTS, 'admin-status.png'), fullPage: true });
    expect(problems).toEqual([]);
    await context.close();
  });

  it('without credentials shows the sign-in form with status 401, and reports the sign-in outcome', async () => {
    const context = await served.browser.newContext();
    const page = await context.newPage();
    const scriptErrors: string[] = [];
    page.on('pageerror', (error) => scriptErrors.push(error.message));
    page.on('console', (message) => {
      // Chromium reports every non-2xx answer as "Failed to load resource"; those are expected here.
      if (message.type() === 'error' && !message.text().startsWith('Failed to load resource')) scriptErrors.push(message.text());
    });

    const response = await page.goto(`${served.base}/admin/status`);
    expect(response?.status()).toBe(401);
    await page.fill('#email', 'admin@example.test');
    await page.fill('#password', 'secret123');
    await page.click('button[type=submit]');
    await page.waitForSelector('#error:not([hidden])');
    expect(await page.textContent('#error')).toBe('Authentication service unavailable');
    await page.screenshot({ path: path.join(ARTIFACTS, 'admin-status-signin.png') });
    expect(scriptErrors).toEqual([]);
    // The page never learns a token: nothing readable from script.
    expect(await page.evaluate<string>('document.cookie')).toBe('');
    await context.close();
  });
});

const auth = realAuth();

describe.runIf(auth)('/admin/status sign-in in Chromium with a real admin account', () => {
  const served = servedInChromium(() => realAuthEnv(auth!));
  let sql: postgres.Sql;

  beforeAll(async () => {
    sql = postgres(inject('stack').databaseUrl, { max: 1, onnotice: () => {} });
    await mkdir(ARTIFACTS, { recursive: true });
  });
  afterAll(async () => {
    await sql?.end();
  });

  it('an admin signs in with e-mail and password and sees the live dashboard; a user without the role is told no; sign-out ends the session', async () => {
    const admin = await signUp(served.base, 'dashboard-admin', 'Dash Admin');
    await sql`insert into public.user_roles (user_id, role) values (${admin.id}, 'admin')`;
    const plain = await signUp(served.base, 'dashboard-user');
    const context = await served.browser.newContext({ viewport: { width: 1280, height: 900 } });
    const page = await context.newPage();
    const pageErrors: string[] = [];
    page.on('pageerror', (error) => pageErrors.push(error.message));

    expect((await page.goto(`${served.base}/admin/status`))?.status()).toBe(401);
    await page.fill('#email', plain.email);
    await page.fill('#password', plain.password);
    await page.click('button[type=submit]');
    await page.waitForSelector('#error:not([hidden])');
    expect(await page.textContent('#error')).toBe('This account is not an administrator.');

    await page.fill('#email', admin.email);
    await page.fill('#password', admin.password);
    await Promise.all([page.waitForEvent('load'), page.click('button[type=submit]')]);
    await expect.poll(() => page.textContent('#connection'), { timeout: 10_000 }).toBe('live');
    // The health figures arrive with the stream's first snapshot, shortly after it connects.
    await expect.poll(() => page.textContent('#auth-status'), { timeout: 10_000 }).toBe('up');
    const [cookie] = (await context.cookies()).filter((entry) => entry.name === SESSION_COOKIE);
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict', path: '/admin/status' });
    await page.screenshot({ path: path.join(ARTIFACTS, 'admin-status-real-admin.png'), fullPage: true });

    await Promise.all([page.waitForEvent('load'), page.click('#signout')]);
    expect(await page.locator('form#signin').count()).toBe(1);
    // The session ended at the auth server: the old cookie no longer opens the page.
    const reused = await served.app.inject({ method: 'GET', url: '/admin/status', headers: { cookie: `${SESSION_COOKIE}=${cookie.value}` } });
    expect(reused.statusCode).toBe(401);
    expect(pageErrors).toEqual([]);
    await context.close();
  });
});
