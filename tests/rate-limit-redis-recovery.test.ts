import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { tmpdir } from 'node:os';
import type { FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import { afterEach, describe, expect, it } from 'vitest';
import { inRateLimitGroup } from '../src/plugins/rate-limit.ts';
import { freePort } from '../scripts/stack/free-port.ts';
import { buildTestApp, buildTestAppWithLog } from './support/app.ts';
import { waitFor } from './support/feedback-fixtures.ts';

// When counting returns to Redis after a stall or a restart, the window's
// count there is at least what this instance counted meanwhile, and the log
// says each outage's start and end. Each test runs its own redis-server
// (without persistence) to stall and restart; the shared one is never touched.

/** The plugin's REDIS_RETRY_AFTER_MS and a margin: Redis is asked again after this. */
const RETRY_AFTER_MS = 5_000 + 300;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface OwnRedis {
  url: string;
  pause(): void;
  resume(): void;
  /** Killed, as a crash: without persistence its counts are gone. */
  kill(): Promise<void>;
  /** Started again on the same port, empty. */
  restart(): Promise<void>;
  /** The count under the one key whose name ends with `suffix`. */
  countOf(suffix: string): Promise<number>;
  /** EVAL commands run so far: the carry is one (the library's own script is an EVALSHA once loaded). */
  evalCalls(): Promise<number>;
}

const running = new Set<ChildProcess>();

async function stopChild(child: ChildProcess): Promise<void> {
  running.delete(child);
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGCONT');
  child.kill('SIGKILL');
  await exited;
}

async function startRedis(): Promise<OwnRedis> {
  const port = await freePort();
  const url = `redis://127.0.0.1:${port}`;
  let child: ChildProcess;
  const start = async () => {
    child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { cwd: tmpdir(), stdio: 'ignore' });
    running.add(child);
    await waitFor(async () => {
      const probe = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
      probe.on('error', () => {});
      try {
        await probe.connect();
        return (await probe.ping()) === 'PONG';
      } catch {
        return false;
      } finally {
        probe.disconnect();
      }
    }, 10_000, `redis-server on port ${port}`);
  };
  await start();
  return {
    url,
    pause: () => child.kill('SIGSTOP'),
    resume: () => child.kill('SIGCONT'),
    kill: () => stopChild(child),
    restart: start,
    async countOf(suffix) {
      const client = new Redis(url, { maxRetriesPerRequest: 1 });
      try {
        const keys = (await client.keys('*')).filter((key) => key.endsWith(suffix));
        expect(keys).toHaveLength(1);
        return Number(await client.get(keys[0]));
      } finally {
        client.disconnect();
      }
    },
    async evalCalls() {
      const client = new Redis(url, { maxRetriesPerRequest: 1 });
      try {
        return Number(/^cmdstat_eval:calls=(\d+)/m.exec(await client.info('commandstats'))?.[1] ?? 0);
      } finally {
        client.disconnect();
      }
    },
  };
}

afterEach(async () => {
  await Promise.all([...running].map(stopChild));
});

async function groupRoutes(app: FastifyInstance) {
  app.post('/t/signin', inRateLimitGroup(app, 'auth'), async () => ({ success: true }));
}

function signIn(app: FastifyInstance, remoteAddress: string): Promise<number> {
  return app.inject({ method: 'POST', url: '/t/signin', remoteAddress }).then((response) => response.statusCode);
}

async function signIns(app: FastifyInstance, remoteAddress: string, times: number): Promise<number[]> {
  const codes: number[] = [];
  for (let i = 0; i < times; i += 1) codes.push(await signIn(app, remoteAddress));
  return codes;
}

describe('counting returns to Redis', () => {
  it('after a stall, with the hits counted in the process meanwhile: the budget stays used up, carried once', async () => {
    const redis = await startRedis();
    const app = await buildTestApp({ REDIS_URL: redis.url, RATE_LIMIT_AUTH_PER_MIN: '10' }, groupRoutes);
    const ip = '203.0.113.90';
    try {
      const codes = await signIns(app, ip, 4);
      redis.pause();
      // The first pays the deadline; then the process counts up to the limit and refuses.
      codes.push(...(await signIns(app, ip, 7)));
      expect(codes).toEqual([...Array<number>(10).fill(200), 429]);
      redis.resume();
      await sleep(RETRY_AFTER_MS);
      // Asked again, Redis has learnt of the 6 counted without it (the first, sent, it ran when it woke):
      // still the same window, still over, and nothing counted twice.
      const evals = await redis.evalCalls();
      expect(await signIn(app, ip)).toBe(429);
      expect(await redis.countOf(`auth:${ip}`)).toBe(12);
      expect(await redis.evalCalls()).toBe(evals + 1);
      // Carried once: the next request is the library's usual count, and adds one.
      expect(await signIn(app, ip)).toBe(429);
      expect(await redis.countOf(`auth:${ip}`)).toBe(13);
      expect(await redis.evalCalls()).toBe(evals + 1);
    } finally {
      await app.close();
    }
  }, 30_000);

  it('after a stall, with two instances: the hits one counted alone are added to what both counted in Redis', async () => {
    const redis = await startRedis();
    const { buildApp } = await import('../src/app.ts');
    const { testConfig } = await import('./support/app.ts');
    const config = testConfig({ REDIS_URL: redis.url, RATE_LIMIT_AUTH_PER_MIN: '10' });
    const shared = { redisNamespace: 'test-two-instances:' };
    const first = await buildApp({ config, rateLimit: shared }, { extend: groupRoutes });
    const second = await buildApp({ config, rateLimit: shared }, { extend: groupRoutes });
    const ip = '203.0.113.93';
    try {
      const codes = [...(await signIns(second, ip, 4)), ...(await signIns(first, ip, 2))];
      redis.pause();
      // 6 in Redis; the first instance counts 4 more alone (it knows of 6 in all, itself).
      codes.push(...(await signIns(first, ip, 4)));
      redis.resume();
      await sleep(RETRY_AFTER_MS);
      // 10 drawn in all: the 11th is over, though neither Redis nor the first instance counted 10.
      codes.push(await signIn(first, ip));
      expect(codes).toEqual([...Array<number>(10).fill(200), 429]);
      expect(await redis.countOf(`auth:${ip}`)).toBe(11);
    } finally {
      await first.close();
      await second.close();
    }
  }, 30_000);

  it('after a restart without persistence, Redis learns the counts of keys still in their window', async () => {
    const redis = await startRedis();
    const { app, lines } = await buildTestAppWithLog({ REDIS_URL: redis.url, RATE_LIMIT_AUTH_PER_MIN: '10' }, 'info', groupRoutes);
    const ip = '203.0.113.91';
    try {
      const codes = await signIns(app, ip, 4);
      await redis.kill();
      codes.push(...(await signIns(app, ip, 2)));
      await redis.restart();
      await waitFor(() => lines.some((line) => line.includes('answers again')), 15_000, 'the reconnect');
      await sleep(RETRY_AFTER_MS);
      codes.push(...(await signIns(app, ip, 5)));
      expect(codes).toEqual([...Array<number>(10).fill(200), 429]);
      expect(await redis.countOf(`auth:${ip}`)).toBe(11);
    } finally {
      await app.close();
    }
  }, 30_000);

  it('a stall longer than the retry: the carry sent meanwhile, run when Redis wakes, is not carried again; the hits after it are', async () => {
    const redis = await startRedis();
    const app = await buildTestApp({ REDIS_URL: redis.url, RATE_LIMIT_AUTH_PER_MIN: '100' }, groupRoutes);
    const ip = '203.0.113.94';
    try {
      await signIns(app, ip, 3);
      redis.pause();
      await signIns(app, ip, 2);
      await sleep(RETRY_AFTER_MS);
      // Redis is asked again, still stalled: the carry (1 counted alone, and this one) waits in Redis's input.
      await signIns(app, ip, 3);
      redis.resume();
      await sleep(RETRY_AFTER_MS);
      await signIn(app, ip);
      expect(await redis.countOf(`auth:${ip}`)).toBe(3 + 2 + 3 + 1);
    } finally {
      await app.close();
    }
  }, 30_000);
});

describe('the log of Redis stalls', () => {
  it('says each one when it begins and when it ends, a second stall too though within 30 s of the first', async () => {
    const redis = await startRedis();
    const { app, lines } = await buildTestAppWithLog({ REDIS_URL: redis.url });
    const said = () =>
      lines
        .map((line) => JSON.parse(line) as { level: number; msg: string })
        .filter((entry) => entry.msg.startsWith('rate-limit store (Redis)'))
        .map((entry) => `${entry.level} ${entry.msg.split(':')[0]}`);
    const request = () => app.inject({ method: 'GET', url: '/api/nothing', remoteAddress: '203.0.113.92' });
    const down = '40 rate-limit store (Redis) unavailable';
    const up = '30 rate-limit store (Redis) answers again';
    try {
      await request();
      expect(said()).toEqual([]);
      redis.pause();
      await request();
      expect(said()).toEqual([down]);
      redis.resume();
      await sleep(RETRY_AFTER_MS);
      await request();
      expect(said()).toEqual([down, up]);
      redis.pause();
      await request();
      expect(said()).toEqual([down, up, down]);
      redis.resume();
    } finally {
      await app.close();
    }
  }, 30_000);
});
