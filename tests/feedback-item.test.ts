import type { FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import { FeedbackSchema } from '../src/modules/feedback/schemas.ts';
import { expectRefused, useAdminApp } from './support/admin-auth.ts';
import { testSql } from './support/db.ts';
import { createWebsite, feedbackBody, pngDataUrl } from './support/feedback-fixtures.ts';
import { call, realAuth, signUp, useRealAuthApp } from './support/real-auth.ts';

// GET /api/feedback/:id: the one item the notification e-mail links to
// (`${ADMIN_URL}/feedback/<id>`), for admins, as the list shows it.

const sql = testSql();
let app: FastifyInstance;
let admin: { authorization: string };

useAdminApp(sql, (built) => ({ app, admin } = built));

const getItem = (id: string) => app.inject({ method: 'GET', url: `/api/feedback/${id}`, headers: admin });

async function submitted(overrides: Record<string, unknown> = {}): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody(overrides) });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

describe('GET /api/feedback/:id (admin, one item)', () => {
  it('answers the item exactly as the list row: every field, text as stored', async () => {
    const websiteId = await createWebsite(sql, 'One item');
    const id = await submitted({ websiteId, name: 'Sam <b>6</b>', category: 'Bug Report', location: 'https://example.test/?x=1&y=2', screenshot: pngDataUrl(12) });
    expect((await app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: admin, payload: { status: 'resolved', adminNotes: 'On it' } })).statusCode).toBe(200);

    const response = await getItem(id);
    expect(response.statusCode, response.body).toBe(200);
    const listed = await app.inject({ method: 'GET', url: `/api/feedback/get-feedback?websiteId=${websiteId}`, headers: admin });
    const [row] = listed.json().data;
    expect(response.json()).toEqual({ success: true, data: row });
    expect(row).toMatchObject({ id, name: 'Sam &lt;b&gt;6&lt;/b&gt;', status: 'resolved', screenshot: `/api/feedback/${id}/screenshot`, screenshotSize: 12 });
    expect(Object.keys(response.json().data)).toEqual(Object.keys(FeedbackSchema.shape));
  });

  it('unknown id → 404 Feedback not found, as PUT answers; malformed id → 400, as PUT answers', async () => {
    const unknown = await getItem(crypto.randomUUID());
    expect(unknown.statusCode).toBe(404);
    expect(unknown.json()).toEqual({ success: false, error: 'Feedback not found', statusCode: 404 });
    const malformed = await getItem('42');
    expect(malformed.statusCode).toBe(400);
    expect(malformed.json()).toEqual({ success: false, error: 'Validation failed', statusCode: 400, details: { id: ['Feedback id must be a UUID'] } });
  });

  it('refuses callers without an admin token: 401 for each refused token', async () => {
    await expectRefused(app, { method: 'GET', url: `/api/feedback/${await submitted()}` });
  });

  it('does not shadow the static paths beside it: export, the list and the screenshot route still answer', async () => {
    const websiteId = await createWebsite(sql, 'Beside the item route');
    const id = await submitted({ websiteId, screenshot: pngDataUrl(12) });
    const exported = await app.inject({ method: 'GET', url: `/api/feedback/export?websiteId=${websiteId}`, headers: admin });
    expect(exported.statusCode).toBe(200);
    expect(exported.headers['content-type']).toBe('text/csv; charset=utf-8');
    const listed = await app.inject({ method: 'GET', url: `/api/feedback/get-feedback?websiteId=${websiteId}`, headers: admin });
    expect(listed.json().data.map((item: { id: string }) => item.id)).toEqual([id]);
    const screenshot = await app.inject({ method: 'GET', url: `/api/feedback/${id}/screenshot`, headers: admin });
    expect(screenshot.headers['content-type']).toBe('image/png');
    // A path that is no route under /api/feedback/ is the item route's malformed id, not a 404; the
    // legacy submission path, which only POST answers, is 405, not an id.
    const notAnId = await app.inject({ method: 'GET', url: '/api/feedback/not-a-route', headers: admin });
    expect(notAnId.json()).toMatchObject({ statusCode: 400, details: { id: ['Feedback id must be a UUID'] } });
    const submitPath = await app.inject({ method: 'GET', url: '/api/feedback/submit-feedback', headers: admin });
    expect([submitPath.statusCode, submitPath.headers.allow]).toEqual([405, 'POST']);
  });

  it('is in the OpenAPI document: admin-only, a UUID path id, the list row as its data', () => {
    const document = app.swagger() as { paths: Record<string, Record<string, any>> };
    const operation = document.paths['/api/feedback/{id}']?.get;
    expect(operation).toMatchObject({ tags: ['feedback'], security: [{ bearer: [] }] });
    expect(operation.parameters).toEqual([expect.objectContaining({ in: 'path', name: 'id', required: true })]);
    const data = operation.responses['200'].content['application/json'].schema.properties.data;
    expect(Object.keys(data.properties)).toEqual(Object.keys(FeedbackSchema.shape));
  });
});

const auth = realAuth();

describe.runIf(auth)('GET /api/feedback/:id with real sessions', () => {
  const server = useRealAuthApp(auth!);

  it('an admin reads it under row-level security; a user without the role gets 403', async () => {
    const { base } = server;
    const id = await submitted();
    const adminUser = await signUp(base, 'feedback-item-admin');
    await sql`insert into public.user_roles (user_id, role) values (${adminUser.id}, 'admin')`;
    const user = await signUp(base, 'feedback-item-user');

    const read = await call(base, 'GET', `/api/feedback/${id}`, { token: adminUser.accessToken });
    expect(read.status).toBe(200);
    expect(read.body.data).toMatchObject({ id, status: 'pending' });
    const refused = await call(base, 'GET', `/api/feedback/${id}`, { token: user.accessToken });
    expect(refused.status).toBe(403);
    expect(refused.body).toEqual({ success: false, error: 'Insufficient permissions', statusCode: 403 });
  });
});
