import packagedChromium from '@sparticuz/chromium';
import type { FastifyInstance } from 'fastify';
import { type Browser, chromium } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import { buildTestApp, type testConfig } from './app.ts';

// Chromium for the browser tests, from the npm package @sparticuz/chromium,
// which ships a headless Chromium build inside itself: `npm install` is all a
// machine needs (no system browser, no download at test time).

export async function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: await packagedChromium.executablePath(),
    // Not the package's own flag set: it is made for serverless hosts and has
    // --single-process (a closed context takes the browser down) and
    // --disable-web-security (no CORS), which would hide what a page sees.
    // Without the background-networking flags Chromium keeps dialling out,
    // which a closed network refuses.
    args: [
      '--no-sandbox',
      '--no-zygote',
      '--disable-gpu',
      '--use-angle=swiftshader',
      '--disable-background-networking',
      '--disable-quic',
      '--no-first-run',
      '--disable-component-update',
      '--disable-sync',
    ],
    headless: true,
  });
}

export interface ServedInChromium {
  app: FastifyInstance;
  /** The app's address, `http://127.0.0.1:<port>`. */
  base: string;
  browser: Browser;
}

/**
 * The app listening on loopback and a Chromium to open its pages, made before
 * the tests of the suite or describe it is called in and closed after them;
 * the fields are there from its beforeAll on. `overrides` is read then, so it
 * may use what an earlier beforeAll made.
 */
export function servedInChromium(overrides: () => Parameters<typeof testConfig>[0] = () => ({})): ServedInChromium {
  const served = {} as ServedInChromium;
  beforeAll(async () => {
    served.app = await buildTestApp(overrides());
    served.base = await served.app.listen({ host: '127.0.0.1', port: 0 });
    served.browser = await launchChromium();
  });
  afterAll(async () => {
    await served.browser?.close();
    await served.app?.close();
  });
  return served;
}
