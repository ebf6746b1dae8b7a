import type { FastifyInstance, InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inRateLimitGroup } from '../src/plugins/rate-limit.ts';
import { buildTestApp } from './support/app.ts';
import { startSilentServer } from './support/silent-server.ts';

// A Redis that accepts connections and never answers must neither slow every
// request down nor open every limit: each Redis command has a deadline, and
// past it the counting goes on in the process.

let stalled: Awaited<ReturnType<typeof startSilentServer>>;
let stalledUrl: string;

beforeAll(async () => {
  stalled = await startSilentServer();
  stalledUrl = `redis://127.0.0.1:${stalled.port}`;
});
afterAll(() => stalled.close());

async function groupRoutes(app: FastifyInstance) {
  app.post('/t/signin', inRateLimitGroup(app, 'auth'), async () => ({ success: true }));
  app.get('/t/general', async () => ({ success: true }));
}

/** The status, or 0 when no answer came within `ms`. */
async function within(app: FastifyInstance, request: InjectOptions, ms: number) {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<number>((resolve) => (timer = setTimeout(() => resolve(0), ms)));
  try {
    return await Promise.race([app.inject(request).then((response) => response.statusCode), late]);
  } finally {
    clearTimeout(timer);
  }
}

describe('a Redis that stalls', () => {
  it('answers every request quickly and still enforces the limits in the process', async () => {
    const app = await buildTestApp({ REDIS_URL: stalledUrl, RATE_LIMIT_AUTH_PER_MIN: '3', RATE_LIMIT_GENERAL_PER_15MIN: '5' }, groupRoutes);
    try {
      const started = performance.now();
      const auth: number[] = [];
      for (let i = 0; i < 5; i += 1) auth.push(await within(app, { method: 'POST', url: '/t/signin', remoteAddress: '203.0.113.80' }, 3_000));
      expect(auth).toEqual([200, 200, 200, 429, 429]);
      const general: number[] = [];
      for (let i = 0; i < 7; i += 1) general.push(await within(app, { method: 'GET', url: '/t/general', remoteAddress: '203.0.113.81' }, 3_000));
      expect(general).toEqual([200, 200, 200, 200, 200, 429, 429]);
      // 12 requests; the deadline is paid at most once before the breaker sends counting to the process.
      expect(performance.now() - started).toBeLessThan(2_000);
    } finally {
      await app.close();
    }
  });
});
