import { describe, expect, it } from 'vitest';
import { ExpiringKeys } from './expiring-keys.ts';

describe('ExpiringKeys (the session-check cache)', () => {
  it('never holds more than maxKeys, however many sessions pass through', () => {
    const keys = new ExpiringKeys(1_000);
    for (let i = 0; i < 50_000; i += 1) keys.add(`session-${i}`, 5_000, 0);
    expect(keys.size).toBe(1_000);
    // The newest are kept, the oldest went first.
    expect(keys.has('session-49999', 1)).toBe(true);
    expect(keys.has('session-0', 1)).toBe(false);
  });

  it('forgets a key at its deadline, and on delete', () => {
    const keys = new ExpiringKeys(10);
    keys.add('a', 100, 0);
    keys.add('b', 100, 0);
    expect(keys.has('a', 99)).toBe(true);
    expect(keys.has('a', 100)).toBe(false);
    expect(keys.size).toBe(1);
    keys.delete('b');
    expect(keys.has('b', 1)).toBe(false);
  });
});
