import { describe, expect, it } from 'vitest';
import { requestFingerprint, scopedIdempotencyKey } from './idempotency.ts';

describe('requestFingerprint', () => {
  const body = { name: 'Ada', email: 'ada@example.test', comment: 'Hello', rating: 5, captchaToken: 'first-token' };

  it('is the same for the same fields in any order, whatever the omitted token and the fields not given', () => {
    const reordered = { rating: 5, comment: 'Hello', captchaToken: 'another-token', email: 'ada@example.test', name: 'Ada', location: undefined };
    expect(requestFingerprint(reordered, ['captchaToken']).equals(requestFingerprint(body, ['captchaToken']))).toBe(true);
  });

  it('differs when a field differs, or is there only once', () => {
    const base = requestFingerprint(body, ['captchaToken']);
    expect(requestFingerprint({ ...body, rating: 4 }, ['captchaToken']).equals(base)).toBe(false);
    expect(requestFingerprint({ ...body, rating: '5' }, ['captchaToken']).equals(base)).toBe(false);
    expect(requestFingerprint({ ...body, category: 'bug' }, ['captchaToken']).equals(base)).toBe(false);
    // The token counts where it is not omitted.
    expect(requestFingerprint(body, []).equals(requestFingerprint({ ...body, captchaToken: 'x' }, []))).toBe(false);
  });
});

describe('scopedIdempotencyKey', () => {
  it('is one client’s own: the same key from another network, or a shifted split, is another', () => {
    const key = scopedIdempotencyKey('203.0.113.1', 'k-1');
    expect(key).toHaveLength(32);
    expect(scopedIdempotencyKey('203.0.113.1', 'k-1').equals(key)).toBe(true);
    expect(scopedIdempotencyKey('203.0.113.2', 'k-1').equals(key)).toBe(false);
    expect(scopedIdempotencyKey('203.0.113.1k', '-1').equals(key)).toBe(false);
  });
});
