import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { createWebsite } from './support/analytics.ts';

// Analytics ingestion has a budget of its own (RATE_LIMIT_INGEST_PER_15MIN):
// one visitor reading 150 pages in 15 minutes, or an office behind one NAT,
// is neither refused nor left without the general API budget.

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';

describe('the ingestion budget', () => {
  it('150 page views from one IP are recorded (default budget), and the general budget is untouched', async () => {
    // The SPEC's general budget; the ingestion budget at its default.
    const app = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: '100', RATE_LIMIT_INGEST_PER_15MIN: undefined });
    try {
      const site = await createWebsite(app, 'Busy reader');
      const remoteAddress = '192.0.2.150';
      const sessionId = `session-${randomUUID()}`;
      const statuses: number[] = [];
      for (let page = 0; page < 150; page += 1) {
        const response = await app.inject({
          method: 'POST',
          url: '/api/analytics',
          remoteAddress,
          payload: { websiteId: site.id, eventType: 'page_view', page: `/article/${page}`, userAgent: CHROME, sessionId },
        });
        statuses.push(response.statusCode);
      }
      expect(statuses.filter((status) => status !== 201)).toEqual([]);
      // The same IP still has all 100 general requests.
      for (let i = 0; i < 100; i += 1) {
        const response = await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}`, remoteAddress });
        expect(response.statusCode, `general request ${i + 1}`).toBe(200);
      }
    } finally {
      await app.close();
    }
  });

  it('the tracker script is loaded on the ingestion budget: visitors behind one address keep loading it past the general 100', async () => {
    const app = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: '100', RATE_LIMIT_INGEST_PER_15MIN: undefined });
    try {
      const remoteAddress = '192.0.2.152';
      const statuses: number[] = [];
      // An office's 120 readers, each loading the script once (no cached copy yet).
      for (let visitor = 0; visitor < 120; visitor += 1) statuses.push((await app.inject({ method: 'GET', url: '/script.js', remoteAddress })).statusCode);
      expect(statuses.filter((status) => status !== 200)).toEqual([]);
      // And the address's general budget is untouched by them: all 100 of it (401, not 429, without a token).
      const general: number[] = [];
      for (let i = 0; i < 100; i += 1) general.push((await app.inject({ method: 'GET', url: '/api/websites', remoteAddress })).statusCode);
      expect(new Set(general)).toEqual(new Set([401]));
    } finally {
      await app.close();
    }
  });

  it('the budget is configurable and answers 429 in the envelope past it', async () => {
    const app = await buildTestApp({ RATE_LIMIT_INGEST_PER_15MIN: '2' });
    try {
      const site = await createWebsite(app, 'Small budget');
      const send = () =>
        app.inject({
          method: 'POST',
          url: '/api/analytics',
          remoteAddress: '192.0.2.151',
          payload: { websiteId: site.id, eventType: 'page_view', page: '/', userAgent: CHROME, sessionId: 's' },
        });
      expect([(await send()).statusCode, (await send()).statusCode]).toEqual([201, 201]);
      const refused = await send();
      expect(refused.statusCode).toBe(429);
      expect(refused.json()).toMatchObject({ success: false, statusCode: 429, retryAfter: expect.any(Number) });
      expect(refused.json().retryAfter).toBeGreaterThan(14 * 60);
    } finally {
      await app.close();
    }
  });
});
