import { randomBytes } from 'node:crypto';
import { appendFileSync } from 'node:fs';
import escapeHtml from 'escape-html';
import type { FastifyInstance } from 'fastify';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { testSql } from './support/db.ts';

// Property-based fuzzing of every route in the app's own OpenAPI document:
// wrong types, missing and extra fields, huge strings, deep nesting, unicode,
// SQL and HTML payloads, invalid JSON and wrong content types, with no token,
// garbage tokens and the admin token. Every answer must be in the SPEC
// envelope and never a 5xx. The one 5xx allowed is 503 `Authentication
// service unavailable` from routes that need the auth server, which the
// fuzzed app is not given (garbage at the real one would only trip its limits).

const RUNS_PER_ROUTE = 200;
const METHODS = ['get', 'post', 'put', 'delete'] as const;

type Operation = {
  method: (typeof METHODS)[number];
  path: string;
  params: string[];
  query: string[];
  bodyFields: string[];
  hasBody: boolean;
};

const nasty = fc.constantFrom(
  "' OR 1=1 --",
  "'; drop table public.feedback; --",
  '<script>alert(1)</script>',
  '<img src=x onerror=alert(1)>',
  '\u0000',
  '\ud83d\ude00\u202e\u0301',
  '../../etc/passwd',
  '%00%2e%2e',
  '{{7*7}}',
  '${jndi:ldap://x}',
  '-1',
  '1e309',
  'NaN',
  '',
  ' ',
  'null',
  '00000000-0000-0000-0000-000000000000',
);

const scalar = fc.oneof(
  fc.string({ maxLength: 40 }),
  fc.string({ unit: 'binary', maxLength: 40 }),
  nasty,
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.uuid(),
  fc.emailAddress(),
  fc.webUrl(),
  fc.date({ noInvalidDate: true }).map((date) => date.toISOString().slice(0, 10)),
  fc.constant('x'.repeat(100_000)),
);

const deep = fc.integer({ min: 50, max: 400 }).map((depth) => {
  let value: unknown = 'bottom';
  // One chain, alternating objects and arrays: deep, but linear in size.
  for (let i = 0; i < depth; i += 1) value = i % 2 ? { nested: value } : [value];
  return value;
});

const value = fc.oneof({ weight: 6, arbitrary: scalar }, { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 3 }) }, { weight: 1, arbitrary: deep });

const pathValue = fc.oneof(fc.uuid(), fc.string({ minLength: 1, maxLength: 30 }), nasty.filter((s) => s.length > 0), fc.constant('x'.repeat(3000)), fc.emailAddress());

function operations(app: FastifyInstance): Operation[] {
  const document = app.swagger() as { paths: Record<string, Record<string, any>> };
  const result: Operation[] = [];
  for (const [path, item] of Object.entries(document.paths)) {
    // Swagger UI and server-sent event streams are not JSON API routes.
    if (path.startsWith('/docs') || path.endsWith('/stream')) continue;
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const parameters: { in: string; name: string }[] = operation.parameters ?? [];
      const schema = operation.requestBody?.content?.['application/json']?.schema;
      result.push({
        method,
        path,
        params: parameters.filter((p) => p.in === 'path').map((p) => p.name),
        query: parameters.filter((p) => p.in === 'query').map((p) => p.name),
        bodyFields: Object.keys(schema?.properties ?? {}),
        hasBody: Boolean(operation.requestBody),
      });
    }
  }
  return result;
}

function requestFor(operation: Operation, adminToken: string) {
  const fields = operation.bodyFields.length ? operation.bodyFields : ['name', 'email'];
  const body = fc.oneof(
    { weight: 5, arbitrary: fc.dictionary(fc.constantFrom(...fields, '__proto__', 'constructor', 'extra'), value, { maxKeys: fields.length + 2 }) },
    { weight: 2, arbitrary: fc.record(Object.fromEntries(fields.map((field) => [field, value]))) },
    { weight: 1, arbitrary: value },
  );
  const payload = fc.oneof(
    { weight: 8, arbitrary: body.map((b) => ({ type: 'application/json', raw: JSON.stringify(b) ?? 'null' })) },
    { weight: 1, arbitrary: fc.constantFrom('{"name": ', '{{}', '[1,2', 'nul', '"\\u00"').map((raw) => ({ type: 'application/json', raw })) },
    {
      weight: 1,
      arbitrary: fc.record({
        type: fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data; boundary=x'),
        raw: fc.string(),
      }),
    },
  );
  const authorization = fc.constantFrom(undefined, 'Bearer garbage', 'Bearer a.b.c', `Bearer ${adminToken}`, `Bearer ${adminToken}`, 'Basic Zm9vOmJhcg==');
  return fc.record({
    params: fc.record(Object.fromEntries(operation.params.map((name) => [name, pathValue]))),
    query: fc.dictionary(fc.constantFrom(...operation.query, 'extra', 'limit'), fc.oneof(fc.string({ maxLength: 30 }), nasty, fc.integer().map(String)), { maxKeys: 4 }),
    payload,
    authorization,
    apiKey: fc.option(fc.string({ maxLength: 60 }), { nil: undefined }),
  });
}

describe('fuzzing every route', () => {
  let app: FastifyInstance;
  let adminToken: string;
  let routes: Operation[];

  beforeAll(async () => {
    app = await buildTestApp({ BODY_LIMIT_BYTES: String(256 * 1024) });
    adminToken = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, crypto.randomUUID());
    routes = operations(app);
  });
  afterAll(async () => app?.close());

  it('finds the API routes in the OpenAPI document', () => {
    expect(routes.length).toBeGreaterThan(5);
    expect(routes.map((route) => `${route.method.toUpperCase()} ${route.path}`)).toContain('POST /api/auth/signup');
  });

  it(`answers ${RUNS_PER_ROUTE} random requests per route in the envelope, never with a 5xx`, { timeout: 600_000 }, async () => {
    const tally: Record<string, Record<number, number>> = {};
    const timings: Record<string, number> = {};
    for (const operation of routes) {
      const label = `${operation.method.toUpperCase()} ${operation.path}`;
      tally[label] = {};
      // The routes that pass a request on to the auth server (this app is given none).
      const callsAuthServer = operation.path.startsWith('/api/auth/') || operation.path.startsWith('/api/users');
      const started = performance.now();
      if (process.env.FUZZ_TRACE) appendFileSync(process.env.FUZZ_TRACE, `${label}\n`);
      await fc.assert(
        fc.asyncProperty(requestFor(operation, adminToken), async (input) => {
          let url = operation.path;
          for (const [name, raw] of Object.entries(input.params)) url = url.replace(`{${name}}`, encodeURIComponent(String(raw)));
          const headers: Record<string, string> = {};
          if (input.authorization) headers.authorization = input.authorization;
          if (input.apiKey !== undefined) headers['x-api-key'] = input.apiKey.replace(/[^\x20-\x7e]/g, '');
          if (operation.hasBody || operation.method !== 'get') headers['content-type'] = input.payload.type;
          const response = await app.inject({
            method: operation.method.toUpperCase() as 'GET',
            url,
            query: input.query,
            headers,
            ...(operation.method === 'get' ? {} : { payload: input.payload.raw }),
          });
          tally[label][response.statusCode] = (tally[label][response.statusCode] ?? 0) + 1;
          const authServerMissing = callsAuthServer && response.statusCode === 503 && response.body.includes('Authentication service unavailable');
          if (response.statusCode >= 500 && !authServerMissing) {
            throw new Error(`${label} → ${response.statusCode}: ${response.body.slice(0, 500)}`);
          }
          const contentType = String(response.headers['content-type'] ?? '');
          // CSV downloads answer 200 with text; their errors are JSON like every other route's.
          const csvDownload = response.statusCode === 200 && contentType.startsWith('text/csv');
          if ((url.startsWith('/api/') && !csvDownload) || contentType.includes('application/json')) {
            const body = response.json();
            expect(typeof body.success).toBe('boolean');
            if (response.statusCode >= 400) {
              expect(body.success).toBe(false);
              expect(typeof body.error).toBe('string');
              expect(body.statusCode).toBe(response.statusCode);
            }
          }
        }),
        { numRuns: RUNS_PER_ROUTE, endOnFailure: true },
      );
      timings[label] = Math.round(performance.now() - started);
    }
    console.log(Object.entries(tally).map(([label, codes]) => `${label} (${timings[label]} ms): ${JSON.stringify(codes)}`).join('\n'));
  });
});

describe('stored text comes back exactly as escaped', () => {
  let app: FastifyInstance;
  let adminToken: string;
  let websiteId: string;
  const sql = testSql();

  beforeAll(async () => {
    app = await buildTestApp();
    adminToken = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, crypto.randomUUID());
    [{ id: websiteId }] = await sql`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('fuzz', 'fuzz.example', ${randomBytes(32)}, 'fuzz') returning id`;
  });
  afterAll(async () => {
    await app?.close();
    await sql.end();
  });

  const text = fc.oneof(
    fc.string({ unit: 'grapheme', minLength: 0, maxLength: 60 }),
    fc.string({ unit: 'binary', minLength: 0, maxLength: 60 }),
    nasty,
    fc.constantFrom('<b>bold</b> & "quoted" \'single\'', '\u0000nul inside', 'tab\tand\nnewline', 'emoji 🎉 and ümlaut'),
  );

  it('feedback name and comment: 201 and read back as escapeHtml(input), or a 400; never a 5xx', { timeout: 300_000 }, async () => {
    let stored = 0;
    await fc.assert(
      fc.asyncProperty(text, text, async (namePart, commentPart) => {
        const name = `N ${namePart}`;
        const comment = `Comment: ${commentPart}`;
        const response = await app.inject({
          method: 'POST',
          url: '/api/feedback',
          payload: { name, email: 'fuzz@example.test', comment, rating: 3, websiteId },
        });
        expect(response.statusCode, response.body).toBeLessThan(500);
        if (response.statusCode !== 201) {
          expect(response.statusCode).toBe(400);
          return;
        }
        stored += 1;
        const { id } = response.json().data;
        const list = await app.inject({
          method: 'GET',
          url: `/api/feedback/get-feedback?websiteId=${websiteId}&limit=5`,
          headers: { authorization: `Bearer ${adminToken}` },
        });
        const item = list.json().data.find((row: { id: string }) => row.id === id);
        expect(item.name).toBe(escapeHtml(name.trim()));
        expect(item.comment).toBe(escapeHtml(comment.trim()));
        expect(item.comment).not.toMatch(/<script/i);
      }),
      { numRuns: RUNS_PER_ROUTE, endOnFailure: true },
    );
    expect(stored).toBeGreaterThan(RUNS_PER_ROUTE / 2);
  });
});
