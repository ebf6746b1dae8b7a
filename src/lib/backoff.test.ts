import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { retryDelayMs } from './backoff.ts';

describe('retryDelayMs', () => {
  const policy = { baseMs: 30_000, maxMs: 3_600_000 };

  it('doubles from the base and stops at the cap (without jitter)', () => {
    const middle = () => 0.5;
    expect([1, 2, 3, 4, 7, 8, 20].map((n) => retryDelayMs(n, policy, middle))).toEqual([
      30_000, 60_000, 120_000, 240_000, 1_920_000, 3_600_000, 3_600_000,
    ]);
  });

  it('stays within ±20% of the exponential value and never above the cap', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 60 }), fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), (attempts, r) => {
        const delay = retryDelayMs(attempts, policy, () => r);
        const plain = Math.min(policy.maxMs, policy.baseMs * 2 ** (attempts - 1));
        return delay >= Math.floor(plain * 0.8) && delay <= Math.min(policy.maxMs, Math.ceil(plain * 1.2));
      }),
    );
  });
});
