import { describe, expect, it } from 'vitest';
import { isoTimestamp } from './timestamps.ts';

describe('isoTimestamp', () => {
  it('writes what new Date(text).toISOString() writes, for every shape PostgreSQL gives a timestamptz', () => {
    for (const text of [
      '2026-11-23 20:56:00.123456+00',
      '2026-11-23 20:56:00.999999+00',
      '2026-11-23 20:56:00.1234+00',
      '2026-11-23 20:56:00.12+00',
      '2026-11-23 20:56:00.1+00',
      '2026-11-23 20:56:00+00',
      '2026-11-23 21:56:00.123456+01',
      '2026-11-24 02:26:00.5+05:30',
      '2026-03-29 01:59:59.999999-07',
    ]) {
      expect(isoTimestamp(text), text).toBe(new Date(text).toISOString());
    }
  });

  it('truncates to milliseconds, never rounds up into the next second', () => {
    expect(isoTimestamp('2025-12-31 23:59:59.999999+00')).toBe('2025-12-31T23:59:59.999Z');
    expect(isoTimestamp('2026-01-01 00:00:00.000001+00')).toBe('2026-01-01T00:00:00.000Z');
  });
});
