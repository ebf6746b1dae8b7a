import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';

// Every request is counted before any credential is looked at, so guessing
// access tokens, the legacy admin secret or API keys is throttled by the
// general budget (SPEC 8: 100 per 15 minutes), and so is the database work
// each guess would cost.

const GENERAL = 100;

describe('rate limits run before authentication', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: String(GENERAL) });
  });
  afterAll(async () => app?.close());

  const attacks: { label: string; request: (i: number) => Record<string, unknown> }[] = [
    { label: 'anonymous GET /api/users/me', request: () => ({ method: 'GET', url: '/api/users/me' }) },
    {
      label: 'guessed Bearer tokens on GET /api/admin/health',
      request: (i) => ({ method: 'GET', url: '/api/admin/health', headers: { authorization: `Bearer guess.${i}.token` } }),
    },
    {
      label: 'guessed API keys in X-API-Key on GET /api/analytics',
      request: (i) => ({
        method: 'GET',
        url: '/api/analytics?websiteId=00000000-0000-4000-8000-000000000000&startDate=2026-01-01&endDate=2026-01-02',
        headers: { 'x-api-key': `guess-${i}-`.padEnd(48, 'x') },
      }),
    },
    {
      label: 'anonymous GET /api/feedback/get-feedback (admin list)',
      request: () => ({ method: 'GET', url: '/api/feedback/get-feedback' }),
    },
  ];

  attacks.forEach(({ label, request }, index) => {
    it(`${label}: the ${GENERAL + 1}th refusal is 429, not 401`, async () => {
      const remoteAddress = `198.51.100.${10 + index}`;
      const codes: number[] = [];
      for (let i = 0; i < GENERAL; i += 1) codes.push((await app.inject({ ...request(i), remoteAddress } as never)).statusCode);
      expect(codes.every((code) => code === 401), `first ${GENERAL}: ${[...new Set(codes)].join(',')}`).toBe(true);
      const over = await app.inject({ ...request(GENERAL), remoteAddress } as never);
      expect(over.statusCode).toBe(429);
      expect(over.json()).toEqual({ success: false, error: 'Too many requests. Please try again later.', statusCode: 429, retryAfter: expect.any(Number) });
    });
  });

  it('METRICS_TOKEN guesses on GET /metrics draw on the general budget; the right token is never limited', async () => {
    const token = 'metrics-token-0123456789abcdef';
    const metricsApp = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: String(GENERAL), METRICS_TOKEN: token });
    try {
      const remoteAddress = '198.51.100.50';
      const codes: number[] = [];
      for (let i = 0; i <= GENERAL; i += 1) {
        codes.push((await metricsApp.inject({ method: 'GET', url: '/metrics', remoteAddress, headers: { authorization: `Bearer guess-${i}` } })).statusCode);
      }
      expect(codes.slice(0, GENERAL).every((code) => code === 401)).toBe(true);
      expect(codes[GENERAL]).toBe(429);
      const scrape = await metricsApp.inject({ method: 'GET', url: '/metrics', remoteAddress, headers: { authorization: `Bearer ${token}` } });
      expect(scrape.statusCode).toBe(200);
    } finally {
      await metricsApp.close();
    }
  });
});
