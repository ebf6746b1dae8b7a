import packagedChromium from '@sparticuz/chromium';
import { type Browser, chromium } from 'playwright-core';

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
