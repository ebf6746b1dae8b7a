import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { getActiveVisitors } from '../src/modules/analytics/live-queries.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp } from './support/app.ts';
import { createWebsite, insertEvents, type TestWebsite } from './support/analytics.ts';
import { asUser, createAuthUser, grantRole, testSql } from './support/db.ts';

// GET /api/analytics/realtime: distinct visitors with an event in the last
// five minutes, per website; who may read it (roles through RLS, or a key
// for its own website).

const sql = testSql();
afterAll(() => sql.end());

const CHROME = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';
const FIREFOX = 'Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0';

describe('live visitors', () => {
  let app: FastifyInstance;
  let busy: TestWebsite;
  let quiet: TestWebsite;
  let admin: { authorization: string };

  beforeAll(async () => {
    app = await buildTestApp();
    admin = await legacyAdmin();
    [busy, quiet] = [await createWebsite(app, 'Busy'), await createWebsite(app, 'Quiet')];
    const record = (websiteId: string, userAgent: string, page: string) =>
      app.inject({
        method: 'POST',
        url: '/api/analytics',
        remoteAddress: '198.51.100.20',
        payload: { websiteId, eventType: 'page_view', page, userAgent, sessionId: `s-${randomUUID()}` },
      });
    // Two visitors on the busy site (one with two events), one on the quiet one.
    for (const answer of await Promise.all([
      record(busy.id, CHROME, '/'),
      record(busy.id, CHROME, '/next'),
      record(busy.id, FIREFOX, '/'),
      record(quiet.id, CHROME, '/'),
    ])) {
      expect(answer.statusCode).toBe(201);
    }
    // Ten minutes ago: no longer active.
    const earlier = new Date(Date.now() - 10 * 60_000).toISOString();
    await insertEvents(sql, busy.id, [{ session: 'old', visitor: 'gone', device: 'desktop', page: '/', at: earlier }]);
  });
  afterAll(async () => app?.close());

  const live = (query: string, headers: Record<string, string>) => app.inject({ method: 'GET', url: `/api/analytics/realtime${query}`, headers });

  it('counts distinct visitors of the last five minutes, per website', async () => {
    const response = await live('', admin);
    expect(response.statusCode).toBe(200);
    const { data } = response.json();
    expect(data.windowSeconds).toBe(300);
    expect(new Date(data.at).toISOString()).toBe(data.at);
    const mine = data.websites.filter((website: { websiteId: string }) => [busy.id, quiet.id].includes(website.websiteId));
    expect(mine).toEqual([
      { websiteId: busy.id, name: 'Busy', activeVisitors: 2 },
      { websiteId: quiet.id, name: 'Quiet', activeVisitors: 1 },
    ]);
    expect(data.activeVisitors).toBeGreaterThanOrEqual(3);

    const one = await live(`?websiteId=${busy.id}`, admin);
    expect(one.json().data).toMatchObject({ activeVisitors: 2, websites: [{ websiteId: busy.id, activeVisitors: 2 }] });
  });

  it("a website's key reads its own website only", async () => {
    const own = await live('', { 'x-api-key': busy.apiKey });
    expect(own.json().data).toMatchObject({ activeVisitors: 2, websites: [{ websiteId: busy.id, name: 'Busy', activeVisitors: 2 }] });
    expect((await live(`?websiteId=${busy.id}`, { 'x-api-key': busy.apiKey })).statusCode).toBe(200);
    const other = await live(`?websiteId=${quiet.id}`, { 'x-api-key': busy.apiKey });
    expect(other.statusCode).toBe(403);
    expect(other.json()).toMatchObject({ success: false, statusCode: 403 });
  });

  it('401 without credentials, 400 for a malformed id, 404 for an unknown website', async () => {
    expect((await live('', {})).statusCode).toBe(401);
    expect((await live('', { 'x-api-key': 'wsk_unknown' })).statusCode).toBe(401);
    const malformed = await live('?websiteId=nope', admin);
    expect(malformed.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { websiteId: ['Website id must be a UUID'] } });
    const unknown = await live(`?websiteId=${randomUUID()}`, admin);
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json().error).toBe('Website not found');
  });

  it('an event dated in the future (a restore, a clock stepped back, a row written by hand) is not an active visitor', async () => {
    const clock = await createWebsite(app, 'Clock');
    const at = (offset: number) => new Date(Date.now() + offset).toISOString();
    await insertEvents(sql, clock.id, [
      { session: 'now', visitor: 'present', device: 'desktop', page: '/', at: at(-60_000) },
      { session: 'soon', visitor: 'early', device: 'desktop', page: '/', at: at(60 * 60_000) },
      { session: 'later', visitor: 'future', device: 'desktop', page: '/', at: at(19 * 24 * 60 * 60_000) },
    ]);
    const response = await live(`?websiteId=${clock.id}`, admin);
    expect(response.json().data).toMatchObject({ activeVisitors: 1, websites: [{ websiteId: clock.id, activeVisitors: 1 }] });
  });

  it('row-level security: a viewer sees active visitors, a user without a role sees no website', async () => {
    const viewer = await createAuthUser(sql);
    await grantRole(sql, viewer.id, 'viewer');
    const seen = await asUser(sql, viewer.id, (tx) => getActiveVisitors(tx, { seconds: 300, websiteId: busy.id, limit: 10 }));
    expect(seen).toEqual([{ websiteId: busy.id, name: 'Busy', activeVisitors: 2 }]);
    const nobody = await createAuthUser(sql);
    expect(await asUser(sql, nobody.id, (tx) => getActiveVisitors(tx, { seconds: 300, websiteId: null, limit: 10 }))).toEqual([]);
  });
});
