import type { FastifyInstance, InjectOptions } from 'fastify';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormatsModule from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { errorStatusesOf } from '../src/plugins/openapi-responses.ts';
import { legacyAdmin, signedInUser } from './support/admin-auth.ts';
import { buildTestApp } from './support/app.ts';
import { testSql } from './support/db.ts';
import { feedbackBody, pngDataUrl } from './support/feedback-fixtures.ts';

// The OpenAPI document is what front ends generate typed clients from, and
// their validation, from. It must be no looser than the server: a body the
// document refuses is one the server refuses too, and a body the server takes
// passes the document. Its refusals are listed by status, and each status a
// route is documented with is one it really answers.

type Schema = Record<string, unknown>;
type Operation = { requestBody?: { content: Record<string, { schema: Schema }> }; responses: Record<string, { content?: Record<string, { schema: Schema }>; headers?: Record<string, unknown> }> };
type Document = { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, Schema> } };

// ajv-formats is CommonJS: its function is the module itself or its default, as the loader gives it.
const addFormats = ((addFormatsModule as unknown as { default?: unknown }).default ?? addFormatsModule) as (ajv: Ajv2020) => Ajv2020;

const sql = testSql();


describe('the OpenAPI document, against what the server does', () => {
  let app: FastifyInstance;
  let document: Document;
  let ajv: Ajv2020;
  let admin: { authorization: string };

  beforeAll(async () => {
    app = await buildTestApp();
    document = (await app.inject('/docs/json')).json();
    ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    // Not among ajv-formats' formats: the pattern beside it carries the rule.
    ajv.addFormat('idn-email', true);
    admin = await legacyAdmin();
  });
  afterAll(async () => {
    await app?.close();
    await sql.end();
  });

  const operation = (method: string, path: string) => {
    const found = document.paths[path]?.[method];
    expect(found, `${method.toUpperCase()} ${path} is documented`).toBeDefined();
    return found!;
  };
  /** Does the document's schema of the operation's JSON body take `body`? */
  const documentTakes = (method: string, path: string, body: unknown) => ajv.validate(operation(method, path).requestBody!.content['application/json'].schema, body);

  type Case = { label: string; method: 'post' | 'put'; path: string; url?: string; headers?: Record<string, string>; body: Record<string, unknown> };

  /** Sends `body` as the case says; the answer's status. */
  const send = async ({ method, path, url, headers, body }: Case) => {
    const answer = await app.inject({ method: method.toUpperCase() as 'POST', url: url ?? path, headers, payload: body });
    return { status: answer.statusCode, json: answer.json() as { error?: string; details?: Record<string, string[]> } };
  };

  it('refuses in the document the bodies the server refuses for rules zod writes no JSON Schema of', async () => {
    const feedbackId = (await send({ label: 'a feedback', method: 'post', path: '/api/feedback', body: feedbackBody() })).json as { data?: { id: string } };
    const refused: Case[] = [
      { label: 'a location that is not http(s)', method: 'post', path: '/api/feedback', body: feedbackBody({ location: 'ftp://example.com/page' }) },
      { label: 'a blank name (trimmed away)', method: 'post', path: '/api/feedback', body: feedbackBody({ name: '     ' }) },
      { label: 'a blank comment (trimmed away)', method: 'post', path: '/api/feedback', body: feedbackBody({ comment: ' '.repeat(12) }) },
      { label: 'an e-mail with a bare quote', method: 'post', path: '/api/feedback', body: feedbackBody({ email: 'a"b@example.com' }) },
      { label: 'an e-mail without a top-level label', method: 'post', path: '/api/feedback', body: feedbackBody({ email: 'someone@localhost' }) },
      { label: 'an SVG screenshot', method: 'post', path: '/api/feedback', body: feedbackBody({ screenshot: 'data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=' }) },
      { label: 'broken base64 in a screenshot', method: 'post', path: '/api/feedback', body: feedbackBody({ screenshot: 'data:image/png;base64,abc' }) },
      {
        label: 'resolvedBy while moving back to pending',
        method: 'put',
        path: '/api/feedback/{id}',
        url: `/api/feedback/${feedbackId.data!.id}`,
        headers: admin,
        body: { status: 'pending', resolvedBy: 'Grace' },
      },
      { label: 'a blank resolvedBy', method: 'put', path: '/api/feedback/{id}', url: `/api/feedback/${feedbackId.data!.id}`, headers: admin, body: { resolvedBy: '   ' } },
      { label: 'a blank website name', method: 'post', path: '/api/websites', headers: admin, body: { name: '   ', domain: 'example.com' } },
      { label: 'a domain with a space', method: 'post', path: '/api/websites', headers: admin, body: { name: 'Site', domain: 'exa mple.com' } },
      { label: 'a domain label ending in a hyphen', method: 'post', path: '/api/websites', headers: admin, body: { name: 'Site', domain: 'example-.com' } },
      { label: 'a blank log message', method: 'post', path: '/api/admin/logs', headers: admin, body: { level: 'info', message: '  ' } },
      { label: 'a blank sign-up name', method: 'post', path: '/api/auth/signup', body: { email: 'someone@example.com', password: 'long enough', name: '   ' } },
    ];
    const answers = [];
    for (const found of refused) {
      const { status, json } = await send(found);
      answers.push({ label: found.label, document: documentTakes(found.method, found.path, found.body), status, error: json.error });
    }
    expect(answers).toEqual(refused.map(({ label }) => ({ label, document: false, status: 400, error: 'Validation failed' })));
  });

  it('takes in the document the bodies the server takes: blank optional fields, capitals in a domain, quoted and non-ASCII e-mails', async () => {
    const taken: (Case & { status: number })[] = [
      { label: 'blank optional fields', method: 'post', path: '/api/feedback', status: 201, body: feedbackBody({ location: '', category: null, screenshot: '', websiteId: null, captchaToken: '' }) },
      { label: 'a location in capitals', method: 'post', path: '/api/feedback', status: 201, body: feedbackBody({ location: 'HTTPS://example.com/Page?q=1' }) },
      { label: 'a quoted local part', method: 'post', path: '/api/feedback', status: 201, body: feedbackBody({ email: '"grace hopper"@example.com' }) },
      { label: 'a non-ASCII local part', method: 'post', path: '/api/feedback', status: 201, body: feedbackBody({ email: 'grâce@example.com' }) },
      { label: 'a PNG screenshot', method: 'post', path: '/api/feedback', status: 201, body: feedbackBody({ screenshot: pngDataUrl(64), category: 'Bug Report' }) },
      { label: 'a domain in capitals, with a port', method: 'post', path: '/api/websites', headers: admin, status: 201, body: { name: ' Site ', domain: 'Example.COM:8080' } },
      { label: 'a domain with white space around it', method: 'post', path: '/api/websites', headers: admin, status: 201, body: { name: 'Site', domain: ' example.org ' } },
      { label: 'a log message', method: 'post', path: '/api/admin/logs', headers: admin, status: 201, body: { level: 'info', message: ' from the document test ' } },
    ];
    const answers = [];
    for (const found of taken) {
      const { status } = await send(found);
      answers.push({ label: found.label, document: documentTakes(found.method, found.path, found.body), status, errors: ajv.errorsText() });
    }
    expect(answers).toEqual(taken.map(({ label, status }) => ({ label, document: true, status, errors: 'No errors' })));
  });

  it("lists the feedback list's category and rating as the submission takes them, and the list's items fit it", async () => {
    const submitted = operation('post', '/api/feedback').requestBody!.content['application/json'].schema as { properties: Record<string, { anyOf?: Schema[] }> };
    const listed = operation('get', '/api/feedback/get-feedback').responses['200'].content!['application/json'].schema;
    const item = ((listed.properties as Record<string, Schema>).data.items as { properties: Record<string, Schema> }).properties;
    expect(item.rating).toMatchObject({ type: 'integer', minimum: 1, maximum: 5 });
    expect(item.category.enum).toEqual([...(submitted.properties.category.anyOf![0].enum as string[]), null]);
    const list = await app.inject({ url: '/api/feedback/get-feedback?limit=100', headers: admin });
    expect(list.statusCode).toBe(200);
    expect(ajv.validate(listed, list.json()), ajv.errorsText()).toBe(true);
    // Not a vacuous fit: an item with a category the submission refuses does not pass.
    const changed = { ...list.json(), data: [{ ...list.json().data[0], category: 'Complaint' }] };
    expect(ajv.validate(listed, changed)).toBe(false);
  });

  it('lists each refusal by its status, with the error envelope, and keeps ranges only for what comes before any route', () => {
    const missing: string[] = [];
    for (const [path, operations] of Object.entries(document.paths)) {
      for (const [method, found] of Object.entries(operations)) {
        const statuses = errorStatusesOf(method, path);
        if (!statuses) missing.push(`${method} ${path}`);
        for (const status of statuses ?? []) {
          const answer = found.responses[String(status)];
          expect(answer, `${method} ${path} ${status}`).toBeDefined();
          if (path !== '/health' && path !== '/api/admin/health') {
            expect(answer.content!['application/json'].schema, `${method} ${path} ${status}`).toEqual({ $ref: '#/components/schemas/ErrorResponse' });
          }
          if (status === 429 || status === 503) expect(Object.keys(answer.headers ?? {}), `${method} ${path} ${status}`).toEqual(['Retry-After']);
        }
      }
    }
    expect(missing).toEqual([]);
    // Every route that takes a body can be refused for it, and every guarded one answers 401.
    expect(errorStatusesOf('post', '/api/feedback')).toEqual([400, 413, 415, 409, 422, 429, 503]);
    expect(errorStatusesOf('get', '/api/websites/api-key/{apiKey}')).toEqual([404, 429, 503]);
  });

  it('is answered, by real requests to each module, with statuses its routes are documented with', async () => {
    const user = { authorization: (await signedInUser(sql)).authorization };
    const oversized = { adminNotes: 'x'.repeat(2 * 1024 * 1024) };
    const requests: [string, string, InjectOptions][] = [
      ['post', '/api/feedback', { method: 'POST', url: '/api/feedback', headers: { 'content-type': 'application/xml' }, payload: '<a/>' }],
      ['put', '/api/feedback/{id}', { method: 'PUT', url: `/api/feedback/${crypto.randomUUID()}`, headers: admin, payload: oversized }],
      ['put', '/api/feedback/{id}', { method: 'PUT', url: `/api/feedback/${crypto.randomUUID()}`, headers: admin, payload: { status: 'resolved' } }],
      ['get', '/api/feedback/{id}', { method: 'GET', url: `/api/feedback/${crypto.randomUUID()}`, headers: user }],
      ['get', '/api/feedback/get-feedback', { method: 'GET', url: '/api/feedback/get-feedback' }],
      ['post', '/api/auth/reset-password', { method: 'POST', url: '/api/auth/reset-password', payload: { email: `nobody-${crypto.randomUUID().slice(0, 8)}@example.test` } }],
      ['post', '/api/auth/signin', { method: 'POST', url: '/api/auth/signin', payload: { email: 'someone@example.com' } }],
      ['get', '/api/auth/me', { method: 'GET', url: '/api/auth/me' }],
      ['get', '/api/admin/metrics', { method: 'GET', url: '/api/admin/metrics', headers: user }],
      ['post', '/api/admin/logs', { method: 'POST', url: '/api/admin/logs', headers: admin, payload: { level: 'loud', message: 'x' } }],
      ['get', '/api/users/{id}', { method: 'GET', url: `/api/users/${crypto.randomUUID()}`, headers: admin }],
      ['get', '/api/userRoles/{userId}', { method: 'GET', url: '/api/userRoles/not-a-uuid', headers: admin }],
      ['get', '/api/websites/api-key', { method: 'GET', url: '/api/websites/api-key' }],
      ['get', '/api/websites/api-key/{apiKey}', { method: 'GET', url: '/api/websites/api-key/wsk_nothing' }],
      ['delete', '/api/websites/{id}', { method: 'DELETE', url: `/api/websites/${crypto.randomUUID()}`, headers: { ...admin, 'content-type': 'application/xml' }, payload: '<a/>' }],
      ['post', '/api/analytics', { method: 'POST', url: '/api/analytics', payload: { websiteId: crypto.randomUUID(), eventType: 'page_view', page: '/', userAgent: 'Mozilla/5.0 (X11; Linux x86_64) Chrome/120', sessionId: 's' } }],
      ['get', '/api/analytics/realtime', { method: 'GET', url: `/api/analytics/realtime?websiteId=${crypto.randomUUID()}`, headers: user }],
    ];
    const seen = [];
    for (const [method, path, request] of requests) {
      const answer = await app.inject(request);
      seen.push({ route: `${method} ${path}`, status: answer.statusCode, documented: errorStatusesOf(method, path)!.includes(answer.statusCode) });
    }
    expect(seen.filter(({ documented }) => !documented)).toEqual([]);
    // The requests above do meet the statuses they are here for.
    expect(new Set(seen.map(({ status }) => status))).toEqual(new Set([400, 401, 403, 404, 413, 415]));
  });

  it('is answered 429 and 503 where it lists them', async () => {
    const limited = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: '1', RATE_LIMIT_INGEST_PER_15MIN: '1' });
    const unreachable = await buildTestApp({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' });
    try {
      await limited.inject('/script.js');
      const script = await limited.inject('/script.js');
      await limited.inject('/api/admin/logs');
      const logs = await limited.inject('/api/admin/logs');
      const feedback = await unreachable.inject({ url: `/api/feedback/${crypto.randomUUID()}`, headers: admin });
      const analytics = await unreachable.inject({ url: `/api/analytics/realtime`, headers: admin });
      expect([script.statusCode, logs.statusCode, feedback.statusCode, analytics.statusCode]).toEqual([429, 429, 503, 503]);
      expect(errorStatusesOf('get', '/script.js')).toContain(429);
      expect(errorStatusesOf('get', '/api/admin/logs')).toContain(429);
      expect(errorStatusesOf('get', '/api/feedback/{id}')).toContain(503);
      expect(errorStatusesOf('get', '/api/analytics/realtime')).toContain(503);
    } finally {
      await limited.close();
      await unreachable.close();
    }
  });
});
