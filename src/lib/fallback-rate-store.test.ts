import { Redis } from 'ioredis';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { type RateStore, localRateStore, redisRateStore } from './fallback-rate-store.ts';
import { RedisAvailability } from './redis-availability.ts';

// The in-process counts (no REDIS_URL, or Redis down): a client's count must
// outlive any number of other clients until its window ends.

const WINDOW = 15 * 60_000;
const MAX = 5;

/** Counts one request for `key`: what the limiter compares with its budget. */
function count(store: RateStore, key: string, timeWindow = WINDOW): { current: number; ttl: number } {
  let result: { current: number; ttl: number } | undefined;
  store.incr(key, (error, counted) => {
    if (error) throw error;
    result = counted;
  }, timeWindow, MAX);
  if (!result) throw new Error('the store did not answer synchronously');
  return result;
}

/** The key of the n-th other /64, as clientNetworkOf writes one. */
const other = (n: number) => `feedback:2001:db8:${(n >> 16).toString(16)}:${(n & 0xffff).toString(16)}::/64`;

afterEach(() => {
  vi.useRealTimers();
});

describe('the in-process rate-limit counts', () => {
  it('keep a spent budget spent after 5,001 other clients (the library LRU gave it back)', () => {
    const store = localRateStore();
    const spent = 'feedback:2001:db8:aaaa:1::/64';
    const first = Array.from({ length: 7 }, () => count(store, spent).current > MAX);
    expect(first).toEqual([false, false, false, false, false, true, true]);
    for (let n = 0; n < 5_001; n += 1) expect(count(store, other(n)).current).toBe(1);
    const after = Array.from({ length: 7 }, () => count(store, spent).current);
    expect(after).toEqual([8, 9, 10, 11, 12, 13, 14]);
  });

  it('keep a budget one short of spent, so stopping short of it and cycling gains nothing', () => {
    const store = localRateStore();
    const client = 'feedback:2001:db8:bbbb:1::/64';
    for (let i = 0; i < MAX - 1; i += 1) count(store, client);
    for (let n = 0; n < 5_001; n += 1) count(store, other(n));
    expect(count(store, client).current).toBe(MAX);
    expect(count(store, client).current).toBe(MAX + 1);
  });

  it('when full of running windows, count new clients in one shared overflow budget and keep the others', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const store = localRateStore({ maxKeys: 3 });
    for (const n of [0, 1, 2]) count(store, other(n));
    // Two new clients past the bound draw on one budget.
    expect([count(store, other(3)).current, count(store, other(4)).current, count(store, other(3)).current]).toEqual([1, 2, 3]);
    // The clients already counted go on with their own.
    expect(count(store, other(0)).current).toBe(2);
    vi.advanceTimersByTime(WINDOW);
    // Their windows have ended: room again, and new clients are counted on their own.
    expect(count(store, other(3)).current).toBe(1);
    expect(count(store, other(4)).current).toBe(1);
    expect(count(store, other(0)).current).toBe(1);
  });

  it('drop ended windows behind a running one when full, so a shorter window frees its room', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const store = localRateStore({ maxKeys: 2 });
    count(store, 'long', WINDOW);
    count(store, 'short', 60_000);
    vi.advanceTimersByTime(60_000);
    expect(count(store, 'new').current).toBe(1);
    expect(count(store, 'newer').current).toBe(1);
    expect(count(store, 'long', WINDOW).current).toBe(2);
  });

  it('answer the rest of the window as the ttl, and read a count without counting', () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const store = localRateStore() as RateStore & { read(key: string, callback: (error: Error | null, count: { current: number; ttl: number }) => void): void };
    expect(count(store, 'a').ttl).toBe(WINDOW);
    vi.advanceTimersByTime(1_000);
    expect(count(store, 'a')).toEqual({ current: 2, ttl: WINDOW - 1_000 });
    let read: unknown;
    store.read('a', (_error, counted) => (read = counted));
    expect(read).toEqual({ current: 2, ttl: WINDOW - 1_000 });
    store.read('unknown', (_error, counted) => (read = counted));
    expect(read).toEqual({ current: 0, ttl: 0 });
  });
});

describe('the Redis counts behind a stalled event loop', () => {
  it('take an answer that arrived while the loop was blocked past the deadline, not a fall-back', async () => {
    // The machine's Redis (127.0.0.1:6379); a missing one fails this test.
    const redis = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
    const nameSpace = `test-stalled-loop-${process.pid}-${Date.now()}-`;
    const failures: string[] = [];
    const state = new RedisAvailability({ unavailable: (error) => failures.push(error.message), answersAgain: () => {} });
    const store = redisRateStore({ redis, nameSpace, deadlineMs: 100, localForMs: 60_000, state });
    const countInRedis = (key: string) =>
      new Promise<number>((resolve, reject) => {
        store.incr(key, (error, counted) => (counted ? resolve(counted.current) : reject(error ?? new Error('no count'))), WINDOW, MAX);
      });
    try {
      await redis.ping();
      // Once first, so the counting script is loaded and the stalled count is a single round trip.
      expect(await countInRedis('warm-up')).toBe(1);
      const counted = countInRedis('stalled');
      // The command is on the wire; the loop is blocked three deadlines long while Redis answers.
      const blockedUntil = Date.now() + 300;
      while (Date.now() < blockedUntil);
      expect(await counted).toBe(1);
      expect(failures).toEqual([]);
      expect(await redis.get(`${nameSpace}stalled`)).toBe('1');
    } finally {
      await redis.del(`${nameSpace}warm-up`, `${nameSpace}stalled`);
      await redis.quit();
    }
  });
});
