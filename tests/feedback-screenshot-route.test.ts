import type { FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import { expectRefused, useAdminApp } from './support/admin-auth.ts';
import { testSql } from './support/db.ts';
import { createWebsite, feedbackBody, pngDataUrl } from './support/feedback-fixtures.ts';

// The admin list stays small however many large screenshots hostile
// submitters send: each item carries a reference (url, type, size) and one
// screenshot is fetched from its own route.

const sql = testSql();
let app: FastifyInstance;
let admin: { authorization: string };
const MB = 1024 * 1024;

useAdminApp(sql, (built) => ({ app, admin } = built));

describe('screenshots by reference', () => {
  it('a page of 10 feedback items with 4.9 MB screenshots is a few KB, not 70 MB', async () => {
    const websiteId = await createWebsite(sql, 'Hostile screenshots');
    const screenshot = pngDataUrl(Math.floor(4.9 * MB));
    for (let i = 0; i < 10; i += 1) {
      const response = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody({ websiteId, screenshot }) });
      expect(response.statusCode).toBe(201);
    }
    const list = await app.inject({ method: 'GET', url: `/api/feedback/get-feedback?websiteId=${websiteId}&limit=100`, headers: admin });
    expect(list.statusCode).toBe(200);
    expect(list.rawPayload.length).toBeLessThan(64 * 1024);
    const items = list.json().data as { id: string; screenshot: unknown; screenshotType: unknown; screenshotSize: unknown }[];
    expect(items).toHaveLength(10);
    for (const item of items) {
      // The SPEC's string field, holding the path of the image instead of the image.
      expect(item.screenshot).toBe(`/api/feedback/${item.id}/screenshot`);
      expect(item.screenshotType).toBe('image/png');
      expect(item.screenshotSize).toBe(Math.floor(4.9 * MB));
    }
  });

  it('GET /api/feedback/:id/screenshot serves the image bytes to an admin', async () => {
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 1, 2, 3, 4, 5]);
    const created = await app.inject({
      method: 'POST',
      url: '/api/feedback',
      payload: feedbackBody({ screenshot: `data:image/png;base64,${bytes.toString('base64')}` }),
    });
    const id = created.json().data.id;
    const response = await app.inject({ method: 'GET', url: `/api/feedback/${id}/screenshot`, headers: admin });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('image/png');
    expect(response.headers['content-security-policy']).toContain("default-src 'none'");
    expect(response.headers['x-content-type-options']).toBe('nosniff');
    expect(response.rawPayload.equals(bytes)).toBe(true);
  });

  it('refuses non-admins, and answers 404 / 400 in the envelope', async () => {
    const created = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody() });
    const id = created.json().data.id;
    await expectRefused(app, { method: 'GET', url: `/api/feedback/${id}/screenshot` });
    const none = await app.inject({ method: 'GET', url: `/api/feedback/${id}/screenshot`, headers: admin });
    expect(none.statusCode).toBe(404);
    expect(none.json()).toEqual({ success: false, error: 'Screenshot not found', statusCode: 404 });
    const missing = await app.inject({ method: 'GET', url: `/api/feedback/${crypto.randomUUID()}/screenshot`, headers: admin });
    expect(missing.statusCode).toBe(404);
    const bad = await app.inject({ method: 'GET', url: '/api/feedback/not-a-uuid/screenshot', headers: admin });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ success: false, error: 'Validation failed', statusCode: 400 });
  });

  it('a stored screenshot of a type we do not serve as an image (SVG written past the API) is a download, never markup', async () => {
    const [row] = await sql<{ id: string }[]>`
      insert into public.feedback (name, email, comment, rating, screenshot)
      values ('Mallory', 'm@example.test', 'written straight into the table', 3,
              ${`data:image/svg+xml;base64,${Buffer.from('<svg onload="alert(1)"/>').toString('base64')}`})
      returning id`;
    const response = await app.inject({ method: 'GET', url: `/api/feedback/${row.id}/screenshot`, headers: admin });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('application/octet-stream');
    expect(response.headers['content-disposition']).toMatch(/^attachment/);
    // The item (and so the list) names the type the route answers, not the stored
    // `image/svg+xml`: a client that builds a Blob of that type would make the markup live.
    const item = await app.inject({ method: 'GET', url: `/api/feedback/${row.id}`, headers: admin });
    expect(item.json().data).toMatchObject({ screenshot: `/api/feedback/${row.id}/screenshot`, screenshotType: 'application/octet-stream' });
  });
});
