import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { adminToken, createWebsite, type FixtureEvent, insertEvents, type TestWebsite } from './support/analytics.ts';

// GET /api/analytics/realtime: visitors on the site now (the last 5 minutes),
// readable by the same callers as the summaries.

describe('GET /api/analytics/realtime', () => {
  let app: FastifyInstance;
  let sql: postgres.Sql;
  let site: TestWebsite;
  let other: TestWebsite;

  const minutesAgo = (minutes: number) => new Date(Date.now() - minutes * 60_000).toISOString();
  const event = (visitor: string, at: string, type: FixtureEvent['type'] = 'page_view'): FixtureEvent => ({
    type,
    page: '/',
    session: `s-${visitor}`,
    visitor,
    device: 'desktop',
    at,
  });

  beforeAll(async () => {
    app = await buildTestApp();
    sql = postgres(inject('stack').databaseUrl, { max: 1, onnotice: () => {} });
    site = await createWebsite(app, 'Live site');
    other = await createWebsite(app, 'Other site');
    await insertEvents(sql, site.id, [
      event('ann', minutesAgo(0.5)),
      event('ann', minutesAgo(1)),
      event('bob', minutesAgo(2), 'custom'),
      event('cy', minutesAgo(4.5)),
      // Outside the window: gone, or another site's.
      event('dee', minutesAgo(6)),
      event('eve', minutesAgo(60)),
    ]);
    await insertEvents(sql, other.id, [event('fay', minutesAgo(1))]);
  });
  afterAll(async () => {
    await app?.close();
    await sql?.end();
  });

  const realtime = (websiteId: string, headers: Record<string, string>) =>
    app.inject({ method: 'GET', url: `/api/analytics/realtime?websiteId=${websiteId}`, headers });

  it("counts the distinct visitors and the page views of the last 5 minutes, this website's only", async () => {
    const response = await realtime(site.id, { 'x-api-key': site.apiKey });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ success: true, data: { websiteId: site.id, windowMinutes: 5, activeVisitors: 3, pageViews: 3 } });
    const admin = await realtime(other.id, { authorization: `Bearer ${await adminToken()}` });
    expect(admin.json().data).toMatchObject({ activeVisitors: 1, pageViews: 1 });
  });

  it('is refused like the summaries: 401 without credentials, 403 with another site\'s key, 404 unknown, 400 malformed', async () => {
    expect((await realtime(site.id, {})).statusCode).toBe(401);
    const forbidden = await realtime(site.id, { 'x-api-key': other.apiKey });
    expect(forbidden.statusCode).toBe(403);
    expect(forbidden.json()).toEqual({ success: false, error: 'Insufficient permissions', statusCode: 403 });
    const unknown = await realtime(crypto.randomUUID(), { authorization: `Bearer ${await adminToken()}` });
    expect(unknown.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
    const malformed = await app.inject({ method: 'GET', url: '/api/analytics/realtime?websiteId=nope', headers: { 'x-api-key': site.apiKey } });
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json().details).toEqual({ websiteId: ['Website id must be a UUID'] });
  });
});
