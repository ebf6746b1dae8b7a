import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { launchChromium } from './support/browser.ts';

// The answers Node's HTTP parser makes the server write itself (431 for
// headers too large, 408 for a request too slow to arrive; plugins/errors.ts,
// clientErrorHandler), read by a front end in Chromium. Without CORS headers
// the page's fetch saw only "TypeError: Failed to fetch", never the envelope.
// The front end's page is served from CORS_ORIGIN (a second port on
// loopback); the same server under the name localhost is another origin,
// which must still be refused.

const REQUEST_TIMEOUT_MS = 1500;

type Outcome = { status: number; body: unknown } | { error: string };

let pageServer: Server;
let frontEnd: string;
let otherOrigin: string;
let app: FastifyInstance;
let api: string;
let browser: Browser;

beforeAll(async () => {
  pageServer = createServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end('<!doctype html><title>Front end</title>');
  });
  await new Promise<void>((resolve) => pageServer.listen(0, '127.0.0.1', resolve));
  const { port } = pageServer.address() as AddressInfo;
  frontEnd = `http://127.0.0.1:${port}`;
  otherOrigin = `http://localhost:${port}`;
  app = await buildTestApp({ CORS_ORIGIN: frontEnd, REQUEST_TIMEOUT_MS: String(REQUEST_TIMEOUT_MS) });
  api = await app.listen({ host: '127.0.0.1', port: 0 });
  browser = await launchChromium();
});
afterAll(async () => {
  await browser?.close();
  await app?.close();
  await new Promise((resolve) => pageServer?.close(resolve));
});

/** A tab on `origin`, its console collected. */
async function openPage(origin: string): Promise<{ context: BrowserContext; page: Page; console: string[] }> {
  const context = await browser.newContext();
  const page = await context.newPage();
  const console: string[] = [];
  page.on('console', (message) => console.push(message.text()));
  expect((await page.goto(`${origin}/`))?.status()).toBe(200);
  return { context, page, console };
}

/** The page's fetch, as a front end makes it: the status and JSON body it reads, or the error it gets. */
function pageFetch(page: Page, url: string, init: { method?: string; headers?: Record<string, string>; body?: string } = {}): Promise<Outcome> {
  return page.evaluate(
    async ({ url, init }) => {
      try {
        const response = await fetch(url, init);
        return { status: response.status, body: await response.json() };
      } catch (error) {
        return { error: String(error) };
      }
    },
    { url, init },
  );
}

/** From here on the tab uploads `bytesPerSecond` (answers come at full speed). */
async function throttleUploads(context: BrowserContext, page: Page, bytesPerSecond: number) {
  const cdp = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: bytesPerSecond });
}

const TOO_LARGE = { status: 431, body: { success: false, error: 'Request header fields too large', statusCode: 431 } };
const TOO_SLOW = { status: 408, body: { success: false, error: 'Request timeout', statusCode: 408 } };
/** A GET whose request line alone is past the 16 KiB header limit: a simple request, sent without a preflight. */
const longUrl = () => `${api}/health?padding=${'a'.repeat(20_000)}`;
/** Chromium's words when an answer names an origin, but not the page's: the answer came, with CORS for the front end only. */
const namesAnotherOrigin = () => expect.stringContaining(`'Access-Control-Allow-Origin' header has a value '${frontEnd}' that is not equal to the supplied origin`);

describe("answers the HTTP parser makes the server write, read by the front end's page", () => {
  it('carry CORS for the front end, the data headers, no-store and Connection: close', async () => {
    const socket = connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    let answer = '';
    socket.on('data', (chunk) => (answer += chunk)).on('error', () => {});
    const closed = new Promise((resolve) => socket.on('close', resolve));
    socket.end(`GET /health HTTP/1.1\r\nHost: x\r\nOrigin: ${frontEnd}\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`);
    await closed;
    const [head, body] = answer.split('\r\n\r\n');
    const [statusLine, ...lines] = head.split('\r\n');
    const headers = Object.fromEntries(lines.map((line) => [line.slice(0, line.indexOf(':')).toLowerCase(), line.slice(line.indexOf(':') + 1).trim()]));
    expect(statusLine).toBe('HTTP/1.1 431 Request Header Fields Too Large');
    expect(JSON.parse(body)).toEqual(TOO_LARGE.body);
    expect(headers).toMatchObject({
      'access-control-allow-origin': frontEnd,
      'access-control-allow-credentials': 'true',
      'access-control-expose-headers': expect.stringContaining('X-Request-Id'),
      vary: 'Origin',
      'cache-control': 'no-store',
      connection: 'close',
      'content-security-policy': "default-src 'none'; frame-ancestors 'none'",
      'x-content-type-options': 'nosniff',
    });
  });

  it('431: the front end reads the envelope, for a header too large (after its preflight) and for a URL too long', async () => {
    const { context, page } = await openPage(frontEnd);
    try {
      expect(await pageFetch(page, `${api}/api/auth/me`, { headers: { authorization: `Bearer ${'a'.repeat(17_000)}` } })).toEqual(TOO_LARGE);
      expect(await pageFetch(page, longUrl())).toEqual(TOO_LARGE);
      // With credentials, as the front end calls the account routes.
      expect(await page.evaluate(async (url) => (await fetch(url, { credentials: 'include' })).status, longUrl())).toBe(431);
    } finally {
      await context.close();
    }
  });

  it('431: a page on another origin still cannot read it', async () => {
    const { context, page, console } = await openPage(otherOrigin);
    try {
      expect(await pageFetch(page, longUrl())).toEqual({ error: 'TypeError: Failed to fetch' });
      await expect.poll(() => console).toContainEqual(namesAnotherOrigin());
    } finally {
      await context.close();
    }
  });

  it('408: the front end reads the envelope when its upload (a screenshot on a slow link) outlasts REQUEST_TIMEOUT_MS', async () => {
    const { context, page } = await openPage(frontEnd);
    try {
      // 80 KB at 20 KiB/s: 4 s, past the deadline.
      await throttleUploads(context, page, 20 * 1024);
      const feedback = {
        name: 'Ann',
        email: 'ann@example.com',
        comment: 'A comment long enough',
        rating: 5,
        screenshot: `data:image/png;base64,${'A'.repeat(80_000)}`,
      };
      const outcome = await pageFetch(page, `${api}/api/feedback`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(feedback) });
      expect(outcome).toEqual(TOO_SLOW);
    } finally {
      await context.close();
    }
  });

  it('408: a page on another origin still cannot read it', async () => {
    const { context, page, console } = await openPage(otherOrigin);
    try {
      // 15 KB (the route takes 16 KiB at most) at 4 KiB/s: 3.7 s, past the deadline.
      await throttleUploads(context, page, 4 * 1024);
      // A text/plain event (as sendBeacon sends it) is a simple request: no preflight stops it first.
      const event = JSON.stringify({ websiteId: crypto.randomUUID(), eventType: 'page_view', page: '/', padding: 'a'.repeat(15_000) });
      expect(await pageFetch(page, `${api}/api/analytics`, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: event })).toEqual({
        error: 'TypeError: Failed to fetch',
      });
      await expect.poll(() => console).toContainEqual(namesAnotherOrigin());
    } finally {
      await context.close();
    }
  });
});
