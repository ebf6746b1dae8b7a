import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BODY_NOT_AN_OBJECT } from '../src/lib/schemas.ts';
import { buildTestApp } from './support/app.ts';

// What a front end written from /docs/json alone needs to know, and the
// document once left out: that feedback text comes back HTML-escaped, the
// units of the analytics summary, which operations are public, the challenge
// a 401 carries, who may call the admin routes.

type Schema = { description?: string; properties?: Record<string, Schema>; items?: Schema };
type Response = { description?: string; headers?: Record<string, { description?: string }>; content?: Record<string, { schema: Schema }> };
type Operation = { summary?: string; tags?: string[]; security?: Record<string, string[]>[]; requestBody?: { content: Record<string, { schema: Schema }> }; responses: Record<string, Response> };
type Document = { paths: Record<string, Record<string, Operation>> };

const METHODS = new Set(['get', 'put', 'post', 'delete', 'patch']);

describe('the OpenAPI document, read by a client generator', () => {
  let app: FastifyInstance;
  let document: Document;
  const operations = () =>
    Object.entries(document.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([method]) => METHODS.has(method))
        .map(([method, operation]) => ({ key: `${method.toUpperCase()} ${path}`, operation })),
    );
  const dataOf = (method: string, path: string, status = '200') =>
    document.paths[path][method].responses[status].content!['application/json'].schema.properties!.data;
  const bodyOf = (method: string, path: string) => document.paths[path][method].requestBody!.content['application/json'].schema;

  beforeAll(async () => {
    app = await buildTestApp();
    document = (await app.inject('/docs/json')).json();
  });
  afterAll(async () => app?.close());

  it('says on each feedback text field that it comes back HTML-escaped, and what to do with it', () => {
    const item = dataOf('get', '/api/feedback/{id}').properties!;
    for (const field of ['name', 'email', 'comment', 'location', 'adminNotes', 'resolvedBy']) {
      expect(item[field].description, field).toMatch(/^HTML-escaped: .*&amp; &lt; &gt; &quot; &#39;.*decode .*never escape it again.*CSV export .* decoded/);
    }
    for (const field of ['rating', 'status', 'createdAt']) expect(item[field].description ?? '', field).not.toContain('escaped');
    const submission = bodyOf('post', '/api/feedback').properties!;
    for (const field of ['name', 'email', 'comment', 'location']) expect(submission[field].description, field).toContain('Stored HTML-escaped');
    const update = bodyOf('put', '/api/feedback/{id}').properties!;
    for (const field of ['adminNotes', 'resolvedBy']) expect(update[field].description, field).toContain('Stored HTML-escaped');
  });

  it('gives the analytics summary its units and what each count counts', () => {
    const summary = dataOf('get', '/api/analytics').properties!;
    expect(summary.avgSessionDuration.description).toMatch(/^Seconds/);
    expect(summary.avgLoadTime.description).toMatch(/^Milliseconds, to 2 decimals/);
    expect(summary.bounceRate.description).toMatch(/^A fraction from 0 to 1 \(not a percentage\), to 4 decimals/);
    expect(summary.referrers.items!.properties!.count.description).toMatch(/^Events of any type/);
    expect(summary.topPages.items!.properties!.views.description).toBe('`page_view` events of this page');
    expect(summary.countries.items!.properties!.visitors.description).toMatch(/^Distinct visitors/);
    expect(summary.campaigns.properties!.utmSource.items!.properties!.visitors.description).toMatch(/^Distinct visitors/);
    expect(summary.devices.items!.properties!.count.description).toBe('Distinct sessions seen on this device type');
    // The same schema, under the website's own path.
    expect(dataOf('get', '/api/analytics/website/{websiteId}').properties!.avgSessionDuration.description).toMatch(/^Seconds/);
  });

  it('writes `security: []` on exactly the public operations, and a scheme (and its 401) on every other', () => {
    const unspecified = operations().filter(({ operation }) => operation.security === undefined).map(({ key }) => key);
    expect(unspecified).toEqual([]);
    const publicOnes = operations().filter(({ operation }) => operation.security!.length === 0).map(({ key }) => key);
    expect(publicOnes.sort()).toEqual(
      [
        'GET /health',
        'GET /script.js',
        'POST /api/feedback',
        'POST /api/feedback/submit-feedback',
        'POST /api/auth/signup',
        'POST /api/auth/signin',
        'POST /api/auth/refresh',
        'POST /api/auth/reset-password',
        'POST /api/auth/update-password',
        'GET /api/websites/api-key/{apiKey}',
        'POST /api/analytics',
      ].sort(),
    );
    const securedWithout401 = operations().filter(({ operation }) => operation.security!.length > 0 && !operation.responses['401']);
    expect(securedWithout401.map(({ key }) => key)).toEqual([]);
  });

  it('lists WWW-Authenticate on the 401 of every operation that takes a Bearer token, and on no other', () => {
    for (const { key, operation } of operations()) {
      const refused = operation.responses['401'];
      if (!refused) continue;
      const bearer = operation.security!.some((scheme) => 'bearer' in scheme);
      if (bearer) expect(refused.headers?.['WWW-Authenticate']?.description, key).toMatch(/RFC 6750.*The access token expired.*POST \/api\/auth\/refresh/);
      else expect(refused.headers?.['WWW-Authenticate'], key).toBeUndefined();
    }
  });

  it("names the admin routes' callers in their summaries, the log entry's included, and describes every success", () => {
    const admin = operations().filter(({ key }) => key.split(' ')[1].startsWith('/api/admin/'));
    expect(admin.length).toBeGreaterThanOrEqual(5);
    for (const { key, operation } of admin) expect(operation.summary, key).toMatch(/\(admin\)$/);
    expect(document.paths['/api/admin/logs'].post.summary).toMatch(/^Store a log entry from an admin's client/);
    const undescribed = operations().flatMap(({ key, operation }) =>
      Object.entries(operation.responses)
        .filter(([status, response]) => status.startsWith('2') && (!response.description || response.description === 'Default Response'))
        .map(([status]) => `${key} ${status}`),
    );
    expect(undescribed).toEqual([]);
  });
});

describe('a JSON body that is not an object', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp();
  });
  afterAll(async () => app?.close());

  it('is refused with a plain message under `body`, as other whole-body rules are, on every route that takes an object', async () => {
    expect(BODY_NOT_AN_OBJECT).toBe('Request body must be a JSON object');
    const refused = { success: false, error: 'Validation failed', statusCode: 400, details: { body: [BODY_NOT_AN_OBJECT] } };
    for (const url of ['/api/feedback', '/api/auth/signup', '/api/auth/signin', '/api/auth/refresh', '/api/auth/reset-password', '/api/auth/update-password', '/api/analytics']) {
      for (const payload of ['[]', '"x"', '3', 'true', '[{"name":"a"}]']) {
        const response = await app.inject({ method: 'POST', url, payload, headers: { 'content-type': 'application/json' } });
        expect(response.json(), `${url} ${payload}`).toEqual(refused);
      }
    }
  });

  it('leaves the messages of fields alone: an object inside the body is named by its field', async () => {
    const response = await app.inject({ method: 'POST', url: '/api/analytics', payload: { metadata: [1] }, headers: { 'content-type': 'application/json' } });
    expect(response.json().details.metadata).toEqual(['Metadata must be a JSON object']);
    expect(response.json().details.body).toBeUndefined();
  });
});
