import { connect, createServer, type Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inRateLimitGroup } from '../src/plugins/rate-limit.ts';
import { freePort } from '../scripts/stack/free-port.ts';
import { buildTestApp, buildTestAppWithLog } from './support/app.ts';
import { waitFor } from './support/feedback-fixtures.ts';

// SPEC section 8 limits, with the counters in memory and in Redis. Real
// routes join their groups in their own modules; these tests give the
// groups stand-in routes so the limiter itself is measured.

const REDIS_URL = 'redis://127.0.0.1:6379';

async function groupRoutes(app: FastifyInstance) {
  app.post('/t/signup', inRateLimitGroup(app, 'auth'), async () => ({ success: true }));
  app.post('/t/signin', inRateLimitGroup(app, 'auth'), async () => ({ success: true }));
  app.post('/t/reset', inRateLimitGroup(app, 'passwordReset'), async () => ({ success: true }));
  app.get('/t/general', async () => ({ success: true }));
}

const limits = {
  RATE_LIMIT_AUTH_PER_MIN: '10',
  RATE_LIMIT_RESET_PER_MIN: '5',
  RATE_LIMIT_GENERAL_PER_15MIN: '100',
};

for (const store of ['memory', 'redis'] as const) {
  describe(`rate limits with counters in ${store}`, () => {
    let app: FastifyInstance;
    beforeAll(async () => {
      if (store === 'redis') {
        // Fail loudly, not skip, when Redis is not there.
        const probe = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0 });
        await probe.connect();
        expect(await probe.ping()).toBe('PONG');
        await probe.quit();
      }
      app = await buildTestApp({ ...limits, ...(store === 'redis' ? { REDIS_URL } : {}) }, groupRoutes);
    });
    afterAll(async () => app?.close());

    it('sign up and sign in share one budget of 10 per minute per IP', async () => {
      const ip = '203.0.113.10';
      for (let i = 0; i < 10; i += 1) {
        const url = i % 2 === 0 ? '/t/signup' : '/t/signin';
        const response = await app.inject({ method: 'POST', url, remoteAddress: ip });
        expect(response.statusCode, `request ${i + 1}`).toBe(200);
      }
      const refused = await app.inject({ method: 'POST', url: '/t/signin', remoteAddress: ip });
      expect(refused.statusCode).toBe(429);
      const body = refused.json();
      expect(body).toEqual({
        success: false,
        error: 'Too many requests. Please try again later.',
        statusCode: 429,
        retryAfter: expect.any(Number),
      });
      expect(body.retryAfter).toBeGreaterThan(0);
      expect(body.retryAfter).toBeLessThanOrEqual(60);
      expect(refused.headers['retry-after']).toBe(String(body.retryAfter));
      // Another IP has its own budget.
      const other = await app.inject({ method: 'POST', url: '/t/signup', remoteAddress: '203.0.113.11' });
      expect(other.statusCode).toBe(200);
    });

    it('an IPv6 client is counted per /64: a new address in the same network draws on the same budget', async () => {
      const network = '2001:db8:4:6';
      for (let i = 1; i <= 10; i += 1) {
        const response = await app.inject({ method: 'POST', url: '/t/signin', remoteAddress: `${network}::${i.toString(16)}` });
        expect(response.statusCode, `address ${i}`).toBe(200);
      }
      const refused = await app.inject({ method: 'POST', url: '/t/signin', remoteAddress: `${network}:ffff:ffff:ffff:ffff` });
      expect(refused.statusCode).toBe(429);
      expect(refused.headers['retry-after']).toBe(String(refused.json().retryAfter));
      expect((await app.inject({ method: 'POST', url: '/t/signin', remoteAddress: '2001:db8:4:7::1' })).statusCode).toBe(200);
    });

    it('the budget headers come with the refusal, not with every answer', async () => {
      const ip = '203.0.113.15';
      for (let i = 0; i < 5; i += 1) {
        const allowed = await app.inject({ method: 'POST', url: '/t/reset', remoteAddress: ip });
        expect(allowed.statusCode).toBe(200);
        expect(Object.keys(allowed.headers).filter((name) => name.startsWith('x-ratelimit') || name === 'retry-after')).toEqual([]);
      }
      const refused = await app.inject({ method: 'POST', url: '/t/reset', remoteAddress: ip });
      expect(refused.statusCode).toBe(429);
      expect(refused.headers['x-ratelimit-limit']).toBe('5');
      expect(refused.headers['x-ratelimit-remaining']).toBe('0');
      expect(refused.headers['x-ratelimit-reset']).toBe(refused.headers['retry-after']);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
    });

    it('password reset allows 5 per minute per IP, apart from the auth budget', async () => {
      const ip = '203.0.113.20';
      for (let i = 0; i < 5; i += 1) {
        expect((await app.inject({ method: 'POST', url: '/t/reset', remoteAddress: ip })).statusCode).toBe(200);
      }
      expect((await app.inject({ method: 'POST', url: '/t/reset', remoteAddress: ip })).statusCode).toBe(429);
      expect((await app.inject({ method: 'POST', url: '/t/signup', remoteAddress: ip })).statusCode).toBe(200);
    });

    it('every other route has the general budget of 100 per 15 minutes; /health is exempt', async () => {
      const ip = '203.0.113.30';
      for (let i = 0; i < 100; i += 1) {
        expect((await app.inject({ method: 'GET', url: '/t/general', remoteAddress: ip })).statusCode).toBe(200);
      }
      const refused = await app.inject({ method: 'GET', url: '/t/general', remoteAddress: ip });
      expect(refused.statusCode).toBe(429);
      expect(refused.json().retryAfter).toBeGreaterThan(14 * 60);
      expect(refused.json().retryAfter).toBeLessThanOrEqual(15 * 60);
      for (let i = 0; i < 5; i += 1) {
        expect((await app.inject({ method: 'GET', url: '/health', remoteAddress: ip })).statusCode).toBe(200);
      }
    });
  });
}

describe('the counters in memory (no REDIS_URL)', () => {
  it('keep a spent budget spent after 5,001 other /64s have asked (the library LRU of 5,000 gave it back)', async () => {
    const app = await buildTestApp(limits, groupRoutes);
    try {
      const spender = '2001:db8:aaaa:1::1';
      const statuses = async () => {
        const codes = [];
        for (let i = 0; i < 7; i += 1) codes.push((await app.inject({ method: 'POST', url: '/t/reset', remoteAddress: spender })).statusCode);
        return codes;
      };
      expect(await statuses()).toEqual([200, 200, 200, 200, 200, 429, 429]);
      const others = Array.from({ length: 5_001 }, (_, n) => `2001:db8:${(n >> 16).toString(16)}:${(n & 0xffff).toString(16)}::1`);
      for (let i = 0; i < others.length; i += 100) {
        const codes = await Promise.all(
          others.slice(i, i + 100).map(async (remoteAddress) => (await app.inject({ method: 'POST', url: '/t/reset', remoteAddress })).statusCode),
        );
        expect(new Set(codes)).toEqual(new Set([200]));
      }
      expect(await statuses()).toEqual([429, 429, 429, 429, 429, 429, 429]);
    } finally {
      await app.close();
    }
    // 5,015 requests through the app: about 12 s on a loaded 2-core machine.
  }, 90_000);
});

describe('rate-limit counters in Redis are shared between instances', () => {
  it('two apps on one Redis namespace draw on one budget', async () => {
    const namespace = { RATE_LIMIT_AUTH_PER_MIN: '3', REDIS_URL };
    const { buildApp } = await import('../src/app.ts');
    const { testConfig } = await import('./support/app.ts');
    const shared = { redisNamespace: `test-shared-${Date.now()}:` };
    const first = await buildApp({ config: testConfig(namespace), rateLimit: shared }, { extend: groupRoutes });
    const second = await buildApp({ config: testConfig(namespace), rateLimit: shared }, { extend: groupRoutes });
    try {
      const ip = '203.0.113.40';
      const codes = [];
      for (const app of [first, second, first, second]) {
        codes.push((await app.inject({ method: 'POST', url: '/t/signin', remoteAddress: ip })).statusCode);
      }
      expect(codes).toEqual([200, 200, 200, 429]);
    } finally {
      await first.close();
      await second.close();
    }
  });
});

describe('a Redis outage', () => {
  it('neither takes the API down nor opens the limits: counting goes on in the process', async () => {
    // Nothing listens on port 1: every Redis command fails.
    const app = await buildTestApp({ REDIS_URL: 'redis://127.0.0.1:1', RATE_LIMIT_AUTH_PER_MIN: '1' }, groupRoutes);
    try {
      const started = performance.now();
      const codes = [];
      for (let i = 0; i < 3; i += 1) {
        codes.push((await app.inject({ method: 'POST', url: '/t/signin', remoteAddress: '203.0.113.50' })).statusCode);
      }
      expect(codes).toEqual([200, 429, 429]);
      expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
      expect(performance.now() - started).toBeLessThan(10_000);
    } finally {
      await app.close();
    }
  });
});

describe('the log of a Redis outage', () => {
  it('says when Redis fails and, once, when it answers again', async () => {
    // Redis behind a port where nothing listens at first; then a proxy to the real one opens there.
    const port = await freePort();
    const { app, lines } = await buildTestAppWithLog({ REDIS_URL: `redis://127.0.0.1:${port}` });
    const sockets = new Set<Socket>();
    const proxy = createServer((client) => {
      const redis = connect(6379, '127.0.0.1');
      for (const socket of [client, redis]) {
        sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => sockets.delete(socket));
      }
      client.pipe(redis).pipe(client);
    });
    try {
      await app.inject({ method: 'GET', url: '/api/nothing', remoteAddress: '203.0.113.60' });
      await waitFor(() => lines.some((line) => line.includes('rate-limit store (Redis) unavailable')), 10_000);
      expect(lines.join('')).not.toContain('answers again');
      await new Promise<void>((resolve) => proxy.listen(port, '127.0.0.1', resolve));
      await waitFor(() => lines.some((line) => line.includes('rate-limit store (Redis) answers again')), 15_000);
      expect(lines.filter((line) => line.includes('answers again'))).toHaveLength(1);
    } finally {
      await app.close();
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => proxy.close(resolve));
    }
  }, 40_000);
});

describe('a 429 and caches', () => {
  it('is never stored, on a route whose scope says no-store (sign-in, feedback) and on one whose scope does not', async () => {
    const app = await buildTestApp({ RATE_LIMIT_AUTH_PER_MIN: '10', RATE_LIMIT_FEEDBACK_PER_15MIN: '5', RATE_LIMIT_GENERAL_PER_15MIN: '3' }, groupRoutes);
    try {
      // The limiter refuses before a scope's own hooks run; each budget is used up from an address of its own.
      for (const [method, url, remoteAddress, budget] of [
        ['POST', '/api/auth/signin', '198.51.100.71', 10],
        ['POST', '/api/feedback', '198.51.100.72', 5],
        ['GET', '/t/general', '198.51.100.73', 3],
      ] as const) {
        const answers = [];
        for (let i = 0; i <= budget; i += 1) answers.push(await app.inject({ method, url, payload: method === 'POST' ? {} : undefined, remoteAddress }));
        const refused = answers.at(-1)!;
        expect(refused.statusCode, url).toBe(429);
        expect(refused.headers['cache-control'], url).toBe('no-store');
      }
      // The stand-in route's own answers say nothing of caching: the 429's no-store is the refusal's.
      expect((await app.inject({ method: 'GET', url: '/t/general', remoteAddress: '198.51.100.74' })).headers['cache-control']).toBeUndefined();
    } finally {
      await app.close();
    }
  });
});

describe('a 429 in the log', () => {
  it('writes one warn line, naming the client and the URL, besides its http line', async () => {
    const { app, lines } = await buildTestAppWithLog({ RATE_LIMIT_GENERAL_PER_15MIN: '2' }, 'http', groupRoutes);
    try {
      const remoteAddress = '198.51.100.81';
      for (let i = 0; i < 3; i += 1) await app.inject({ method: 'GET', url: '/t/general?attempt=' + i, remoteAddress });
      const entries = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
      // The start's own warnings (no auth server, no mail transport here) carry no request id.
      const requestWarnings = entries.filter((entry) => entry.level === 40 && entry.requestId !== undefined);
      expect(requestWarnings).toEqual([
        expect.objectContaining({ msg: 'request refused', statusCode: 429, error: 'Too many requests. Please try again later.', ip: remoteAddress, url: '/t/general?attempt=2' }),
      ]);
      expect(entries.filter((entry) => entry.msg === 'request completed').map((entry) => entry.statusCode)).toEqual([200, 200, 429]);
    } finally {
      await app.close();
    }
  });
});
