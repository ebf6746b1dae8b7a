import { createHash, randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type ExclusiveClaims, redisClaims } from '../src/lib/exclusive-claims.ts';
import type { FallbackState } from '../src/lib/redis-availability.ts';
import { startSilentServer } from './support/silent-server.ts';

// Claims against the machine's real Redis: what two instances sharing it see,
// expiry, and a Redis that stalls (claims then held in the process, never
// granted to everyone).

const nameSpace = `claims-test-${randomBytes(6).toString('hex')}:`;
let redis: Redis;
let stalled: Awaited<ReturnType<typeof startSilentServer>>;

beforeAll(async () => {
  redis = new Redis('redis://127.0.0.1:6379', { maxRetriesPerRequest: 1 });
  await redis.ping();
  stalled = await startSilentServer();
});
afterAll(async () => {
  const keys = await redis.keys(`${nameSpace}*`);
  if (keys.length > 0) await redis.del(...keys);
  redis.disconnect();
  await stalled.close();
});

function instance(client: Redis, ttlMs = 60_000): { claims: ExclusiveClaims; state: FallbackState; failures: Error[] } {
  const failures: Error[] = [];
  const state: FallbackState = { localUntil: 0, onFailure: (error) => failures.push(error) };
  return { claims: redisClaims({ redis: client, nameSpace, ttlMs, deadlineMs: 200, localForMs: 5_000, state }), state, failures };
}

describe('exclusive claims in Redis', () => {
  it('one holder across two instances; given back, the key is free again; the address is not in Redis', async () => {
    const [a, b] = [instance(redis), instance(redis)];
    const key = 'password-reset:ada@example.test';
    const first = await Promise.all([a.claims.claim(key), b.claims.claim(key), a.claims.claim(key), b.claims.claim(key)]);
    expect(first.filter(Boolean)).toHaveLength(1);
    const keys = await redis.keys(`${nameSpace}*`);
    expect(keys).toHaveLength(1);
    expect(keys[0]).not.toContain('ada');
    expect(await redis.pttl(keys[0])).toBeGreaterThan(55_000);
    const holder = first.indexOf(true) % 2 === 0 ? a : b;
    const other = holder === a ? b : a;
    // The other instance giving back what it never held changes nothing.
    await other.claims.release(key);
    expect(await other.claims.claim(key)).toBe(false);
    await holder.claims.release(key);
    expect(await redis.keys(`${nameSpace}*`)).toEqual([]);
    expect(await other.claims.claim(key)).toBe(true);
    await other.claims.release(key);
    expect([...a.failures, ...b.failures]).toEqual([]);
  });

  it('a claim whose holder never gave it back ends at its expiry, and the late release leaves the new holder alone', async () => {
    const [a, b] = [instance(redis, 150), instance(redis, 60_000)];
    const key = 'password-reset:late@example.test';
    expect(await a.claims.claim(key)).toBe(true);
    expect(await b.claims.claim(key)).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(await b.claims.claim(key)).toBe(true);
    await a.claims.release(key);
    expect(await instance(redis).claims.claim(key)).toBe(false);
    await b.claims.release(key);
  });

  it('a claim may name its own expiry, longer or shorter than the claims\' own; one that names none keeps theirs', async () => {
    const { claims } = instance(redis, 60_000);
    const [long, short, plain] = ['password-update:long', 'password-update:short', 'password-reset:plain@example.test'];
    expect(await claims.claim(long, 150_000)).toBe(true);
    expect(await claims.claim(short, 150)).toBe(true);
    expect(await claims.claim(plain)).toBe(true);
    const ttlOf = async (key: string) => redis.pttl(`${nameSpace}claim:${createHash('sha256').update(key).digest('base64url')}`);
    expect(await ttlOf(long)).toBeGreaterThan(140_000);
    expect(await ttlOf(plain)).toBeGreaterThan(55_000);
    expect(await ttlOf(plain)).toBeLessThanOrEqual(60_000);
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(await instance(redis).claims.claim(short)).toBe(true);
    expect(await instance(redis).claims.claim(long)).toBe(false);
    for (const key of [long, plain]) await claims.release(key);
    expect(await redis.keys(`${nameSpace}*`)).toHaveLength(1);
  });

  it('a Redis that stalls: claims are held in the process after one deadline, still one at a time', async () => {
    const stalledRedis = new Redis(`redis://127.0.0.1:${stalled.port}`, { maxRetriesPerRequest: 1 });
    try {
      const { claims, state, failures } = instance(stalledRedis);
      const key = 'password-reset:stall@example.test';
      const started = performance.now();
      expect(await claims.claim(key)).toBe(true);
      expect(await claims.claim(key)).toBe(false);
      expect(performance.now() - started).toBeLessThan(1_000);
      expect(failures.map((error) => error.message)).toEqual(['Redis did not answer within 200 ms']);
      expect(state.localUntil).toBeGreaterThan(Date.now());
      await claims.release(key);
      expect(await claims.claim(key)).toBe(true);
    } finally {
      stalledRedis.disconnect();
    }
  });
});
