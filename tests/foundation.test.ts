import { type AddressInfo, connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import Fastify, { type FastifyInstance } from 'fastify';
import errorsPlugin, { PATH_MATCHING } from '../src/plugins/errors.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp, buildTestAppWithLog, testConfig } from './support/app.ts';

const FRONTEND = 'http://localhost:5173';

describe('app foundation', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp({ CORS_ORIGIN: FRONTEND });
  });
  afterAll(async () => app.close());

  it('GET /health answers ok with an ISO timestamp', async () => {
    const response = await app.inject({ method: 'GET', url: '/health' });
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body).toMatchObject({ success: true, status: 'ok' });
    expect(new Date(body.timestamp).toISOString()).toBe(body.timestamp);
  });

  it('unknown routes get a 404 in the envelope', async () => {
    const response = await app.inject({ method: 'GET', url: '/api/nothing-here?x=1' });
    expect(response.statusCode).toBe(404);
    expect(response.json()).toEqual({ success: false, error: 'Route GET /api/nothing-here not found', statusCode: 404 });
  });

  it('a path the app has, asked with a method it does not answer, gets 405 with the methods it does', async () => {
    for (const [method, url, allow] of [
      ['GET', '/api/auth/signin?x=1', 'POST'],
      ['DELETE', '/api/auth/me', 'GET, HEAD'],
      ['PATCH', '/api/feedback/0b1c2d3e-0000-4000-8000-000000000000/', 'GET, HEAD, PUT, DELETE'],
      ['PROPFIND', '/health', 'GET, HEAD'],
      // Paths written out whole for one method that another method's parametric route would take
      // (GET /api/feedback/:id, PUT /api/users/:id): 405 before its token check, not 401 or 400.
      ['GET', '/api/feedback/submit-feedback', 'POST'],
      ['PUT', '/api/feedback/get-feedback/', 'GET, HEAD'],
      ['PUT', '/api/users/me', 'GET, HEAD'],
      // A method neither route has: the methods named are the path's own, not the parametric route's
      // (which refuses it), so a client that follows Allow is not refused again.
      ['DELETE', '/api/feedback/get-feedback', 'GET, HEAD'],
      ['DELETE', '/api/users/me', 'GET, HEAD'],
    ] as const) {
      const response = await app.inject({ method: method as 'GET', url });
      const path = url.split('?')[0];
      expect([response.statusCode, response.headers.allow], `${method} ${url}`).toEqual([405, allow]);
      expect(response.json()).toEqual({ success: false, error: `Method ${method} not allowed on ${path}; it answers ${allow}`, statusCode: 405 });
    }
    // A path no method has is still 404, a preflight is still the CORS plugin's, and a parametric
    // route still takes every other value.
    expect((await app.inject({ method: 'DELETE', url: '/api/nothing-here' })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/api/feedback/submit-feedbacks' })).json()).toMatchObject({ statusCode: 401, error: 'Authentication required' });
    for (const [url, method] of [['/api/auth/signin', 'POST'], ['/api/users/me', 'GET'], ['/api/feedback/submit-feedback', 'POST']]) {
      const preflight = await app.inject({ method: 'OPTIONS', url, headers: { origin: FRONTEND, 'access-control-request-method': method } });
      expect(preflight.statusCode, url).toBe(204);
    }
  });

  it('every route answers with a trailing slash as without it, whether it is written under a prefix or whole', async () => {
    const admin = await legacyAdmin();
    for (const [method, url, headers] of [
      ['POST', '/api/feedback', {}],
      ['POST', '/api/auth/signin', {}],
      ['GET', '/api/feedback/get-feedback', admin],
      ['GET', '/api/websites', admin],
      ['POST', '/api/analytics', {}],
    ] as const) {
      const bare = await app.inject({ method, url, headers, payload: method === 'POST' ? {} : undefined });
      const slashed = await app.inject({ method, url: `${url}/`, headers, payload: method === 'POST' ? {} : undefined });
      expect(bare.statusCode, `${method} ${url}`).not.toBe(404);
      expect([slashed.statusCode, slashed.json()], `${method} ${url}/`).toEqual([bare.statusCode, bare.json()]);
    }
  });

  it('a path segment over 1,024 characters is 414 in the envelope; one under it is the route\'s own 400', async () => {
    const long = await app.inject({ method: 'GET', url: `/api/users/${'a'.repeat(1025)}` });
    expect(long.statusCode).toBe(414);
    expect(long.json()).toEqual({ success: false, error: 'URI too long', statusCode: 414 });
    const short = await app.inject({ method: 'GET', url: `/api/users/${'a'.repeat(1024)}`, headers: await legacyAdmin() });
    expect(short.statusCode).toBe(400);
    expect(short.json().details).toEqual({ id: ['User id must be a UUID'] });
  });

  it('a URL refused before routing (bad percent-encoding, a segment too long) still carries CORS, the request id and the data headers', async () => {
    // The router refuses these before any hook runs; without the CORS headers the front end's
    // fetch saw only a network error, never the 400 or 414 and its message.
    for (const [url, status] of [
      ['/api/users/email/100%@example.com', 400],
      [`/api/users/${'a'.repeat(1025)}`, 414],
    ] as const) {
      const response = await app.inject({ method: 'GET', url, headers: { origin: FRONTEND, 'x-request-id': 'bad-url-1' } });
      expect(response.statusCode, url).toBe(status);
      expect(response.json().success).toBe(false);
      expect(response.headers['access-control-allow-origin']).toBe(FRONTEND);
      expect(response.headers['access-control-allow-credentials']).toBe('true');
      expect(String(response.headers['access-control-expose-headers'])).toContain('X-Request-Id');
      expect(String(response.headers.vary)).toContain('Origin');
      expect(response.headers['x-request-id']).toBe('bad-url-1');
      expect(response.headers['content-security-policy']).toBe("default-src 'none'; frame-ancestors 'none'");
      expect(response.headers['x-content-type-options']).toBe('nosniff');
    }
    // Another origin still gets no CORS headers.
    const other = await app.inject({ method: 'GET', url: '/api/users/email/100%@example.com', headers: { origin: 'https://evil.example' } });
    expect(other.statusCode).toBe(400);
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
    expect(other.headers['access-control-allow-credentials']).toBeUndefined();
  });

  it('malformed JSON is a 400 in the envelope, never a 500', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/api/anything',
      headers: { 'content-type': 'application/json' },
      payload: '{"name": ',
    });
    expect(response.statusCode).toBe(400);
    expect(response.json()).toEqual({ success: false, error: 'Malformed JSON in request body', statusCode: 400 });
  });

  it('well-formed JSON with a __proto__ or constructor.prototype key is refused naming the field, not called malformed', async () => {
    const ingest = (payload: string) => app.inject({ method: 'POST', url: '/api/analytics', headers: { 'content-type': 'application/json' }, payload });
    for (const [payload, field] of [
      ['{"websiteId":"x","metadata":{"__proto__":{"admin":true}}}', 'metadata'],
      ['{"websiteId":"x","metadata":{"a":[{"constructor":{"prototype":{"admin":true}}}]}}', 'metadata'],
      ['{"__proto__":{"admin":true}}', 'body'],
    ] as const) {
      const response = await ingest(payload);
      expect([response.statusCode, response.json()], payload).toEqual([
        400,
        { success: false, error: 'Validation failed', statusCode: 400, details: { [field]: ['Must not contain the key "__proto__", or "constructor" holding "prototype"'] } },
      ]);
    }
    // A key merely named constructor is data, and broken JSON is still malformed.
    const constructorKey = await ingest('{"websiteId":"x","metadata":{"constructor":"mine"}}');
    expect(constructorKey.json().error).not.toBe('Malformed JSON in request body');
    const broken = await ingest('{"__proto__": ');
    expect(broken.json()).toEqual({ success: false, error: 'Malformed JSON in request body', statusCode: 400 });
  });

  it('a body that is not an object is refused under details.body, as the other whole-body checks name it', async () => {
    // (`null` reads as a body with no fields: each required one is named.)
    for (const payload of ['[]', '"text"', '42']) {
      const response = await app.inject({ method: 'POST', url: '/api/feedback', headers: { 'content-type': 'application/json' }, payload });
      expect(response.statusCode, payload).toBe(400);
      const body = response.json();
      expect([body.error, Object.keys(body.details)], payload).toEqual(['Validation failed', ['body']]);
      expect(body.details.body, payload).toEqual([expect.any(String)]);
    }
  });

  it('a JSON body must be UTF-8: another charset is 415, bytes that are not UTF-8 are 400, never stored as U+FFFD', async () => {
    const signIn = (contentType: string, payload: string | Buffer) =>
      app.inject({ method: 'POST', url: '/api/auth/signin', headers: { 'content-type': contentType }, payload });
    const latin1 = Buffer.from('{"email":"caf\xe9@example.com"}', 'latin1');
    for (const contentType of ['application/json; charset=latin1', 'application/json; charset="ISO-8859-1"', 'application/json;charset=utf-16']) {
      const refused = await signIn(contentType, latin1);
      expect(refused.statusCode, contentType).toBe(415);
      expect(refused.json()).toEqual({ success: false, error: 'Unsupported charset; send the body as UTF-8', statusCode: 415 });
    }
    const notUtf8 = await signIn('application/json', latin1);
    expect(notUtf8.statusCode).toBe(400);
    expect(notUtf8.json()).toEqual({ success: false, error: 'Request body is not valid UTF-8', statusCode: 400 });
    // UTF-8, said or not, reaches the route (which answers for the missing password).
    for (const contentType of ['application/json', 'application/json; charset=UTF-8', 'APPLICATION/JSON; Charset=utf8']) {
      const parsed = await signIn(contentType, Buffer.from('{"email":"café@example.com"}', 'utf8'));
      expect(parsed.json(), contentType).toMatchObject({ error: 'Email and password are required' });
    }
    // So does plain ASCII under any label: its bytes read the same in UTF-8.
    for (const contentType of ['application/json; charset=us-ascii', 'application/json; charset=ISO-8859-1']) {
      const ascii = await signIn(contentType, Buffer.from('{"email":"cafe@example.com"}', 'latin1'));
      expect(ascii.json(), contentType).toMatchObject({ error: 'Email and password are required' });
    }
  });

  it('a compressed body is 415 naming the encoding, not 400 for bytes that are not UTF-8; identity is no encoding', async () => {
    const { gzipSync } = await import('node:zlib');
    const body = Buffer.from(JSON.stringify({ email: 'a@example.test', password: 'secret1' }));
    for (const [url, contentType] of [['/api/auth/signin', 'application/json'], ['/api/analytics', 'text/plain']] as const) {
      for (const encoding of ['gzip', 'br', 'deflate, gzip']) {
        const response = await app.inject({ method: 'POST', url, headers: { 'content-type': contentType, 'content-encoding': encoding }, payload: gzipSync(body) });
        expect([response.statusCode, response.json()], `${url} ${encoding}`).toEqual([415, { success: false, error: 'Unsupported content encoding; send the body uncompressed', statusCode: 415 }]);
      }
    }
    const identity = await app.inject({ method: 'POST', url: '/api/auth/signin', headers: { 'content-type': 'application/json', 'content-encoding': 'identity' }, payload: '{}' });
    expect(identity.json()).toMatchObject({ error: 'Email and password are required' });
  });

  it('an unpaired surrogate escaped in a JSON string is refused with the field named; a pair (an emoji) is text', async () => {
    const signIn = (payload: string) => app.inject({ method: 'POST', url: '/api/auth/signin', headers: { 'content-type': 'application/json' }, payload });
    for (const [payload, field] of [
      ['{"email":"a\\ud800@example.com","password":"secret1"}', 'email'],
      ['{"email":"a@example.com","password":"\\udfff\\udfff\\udfff"}', 'password'],
      ['{"email":"a@example.com","nested":{"deep":["x\\uDBFFy"]}}', 'nested'],
      ['{"email":"a@example.com","\\ud800":1}', 'body'],
    ]) {
      const refused = await signIn(payload);
      expect(refused.statusCode, payload).toBe(400);
      expect(refused.json(), payload).toEqual({
        success: false,
        error: 'Validation failed',
        statusCode: 400,
        details: { [field]: ['Must not contain unpaired surrogates (\\ud800-\\udfff)'] },
      });
    }
    expect((await signIn('{"email":"\\ud83c\\udf89@example.com"}')).json()).toMatchObject({ error: 'Email and password are required' });
  });

  it('a body nested too deep or holding too many values is refused from its text, before it is parsed: 7 MB on the feedback route', async () => {
    const head = '{"comment":"Deep","extra":';
    const deep = { success: false, error: 'Validation failed', statusCode: 400, details: { extra: ['Must be nested at most 32 levels deep'] } };
    const many = { success: false, error: 'Validation failed', statusCode: 400, details: { body: ['Must hold at most 20000 values (the body, and each member and element in it)'] } };
    const cases = [
      ['closed brackets', `${head}${'['.repeat(3_500_000)}${']'.repeat(3_500_000)}}`, deep],
      // Not JSON at all: it is refused for its depth all the same, which only a pass over the text can see.
      ['unclosed brackets', `${head}${'['.repeat(7_000_000)}`, deep],
      ['empty objects', `${head}[${'{},'.repeat(2_333_333)}{}]}`, many],
    ] as const;
    for (const [index, [label, payload, expected]] of cases.entries()) {
      expect(payload.length).toBeGreaterThan(7_000_000);
      const refused = await app.inject({ method: 'POST', url: '/api/feedback', headers: { 'content-type': 'application/json' }, payload, remoteAddress: `198.51.100.${71 + index}` });
      expect([refused.statusCode, refused.json()], label).toEqual([400, expected]);
    }
  });

  it('returns the caller request id, or makes one', async () => {
    const given = await app.inject({ method: 'GET', url: '/health', headers: { 'x-request-id': 'abc-123.def' } });
    expect(given.headers['x-request-id']).toBe('abc-123.def');
    const made = await app.inject({ method: 'GET', url: '/health' });
    expect(made.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
    const unsafe = await app.inject({ method: 'GET', url: '/health', headers: { 'x-request-id': 'bad id\nforged log line' } });
    expect(unsafe.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  });

  it('sends data responses a short policy that forbids any use as a document', async () => {
    for (const url of ['/health', '/no/such/route']) {
      const response = await app.inject({ method: 'GET', url });
      expect(response.headers['content-security-policy']).toBe("default-src 'none'; frame-ancestors 'none'");
      expect(response.headers['x-content-type-options']).toBe('nosniff');
      expect(response.headers['x-frame-options']).toBe('DENY');
      expect(response.headers['referrer-policy']).toBe('no-referrer');
      expect(response.headers['cross-origin-resource-policy']).toBe('same-origin');
      // helmet's document-only headers stay off JSON.
      expect(response.headers['x-dns-prefetch-control']).toBeUndefined();
      expect(response.headers['x-powered-by']).toBeUndefined();
    }
  });

  it("sends the HTML pages helmet's full policy", async () => {
    for (const url of ['/admin/status', '/docs']) {
      const response = await app.inject({ method: 'GET', url });
      expect(response.headers['x-frame-options']).toBe('SAMEORIGIN');
      expect(response.headers['x-dns-prefetch-control']).toBe('off');
      expect(response.headers['content-security-policy']).toContain("default-src 'self'");
    }
  });

  it('asks browsers to upgrade the pages\' requests to HTTPS only in production, which is served over TLS', async () => {
    // Over plain HTTP at any address but localhost (a dev server on 0.0.0.0 opened from
    // another machine), `upgrade-insecure-requests` sent the dashboard's own script and style
    // to https://, which failed: a blank page that never connected.
    for (const [url, headers] of [['/admin/status', {}], ['/admin/status', await legacyAdmin()], ['/docs/', {}], ['/docs/static/index.html', {}]] as const) {
      const response = await app.inject({ method: 'GET', url, headers });
      expect(String(response.headers['content-security-policy']), url).toContain("default-src 'self'");
      expect(String(response.headers['content-security-policy']), url).not.toContain('upgrade-insecure-requests');
    }
    const production = await buildTestApp({ NODE_ENV: 'production' });
    try {
      for (const url of ['/admin/status', '/docs/static/index.html']) {
        const page = await production.inject({ method: 'GET', url });
        expect(String(page.headers['content-security-policy']), url).toContain('upgrade-insecure-requests');
        expect(page.headers['strict-transport-security'], url).toBe('max-age=31536000; includeSubDomains');
      }
    } finally {
      await production.close();
    }
  });

  it("a page's answer refused before the page is reached is data, and carries the data set", async () => {
    const limited = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: '1' });
    try {
      await limited.inject({ method: 'GET', url: '/admin/status' });
      const refused = await limited.inject({ method: 'GET', url: '/admin/status' });
      expect(refused.statusCode).toBe(429);
      expect(refused.headers['content-security-policy']).toBe("default-src 'none'; frame-ancestors 'none'");
      expect(refused.headers['x-frame-options']).toBe('DENY');
    } finally {
      await limited.close();
    }
  });

  it('allows CORS for the configured origin with credentials', async () => {
    const preflight = await app.inject({
      method: 'OPTIONS',
      url: '/health',
      headers: { origin: FRONTEND, 'access-control-request-method': 'POST' },
    });
    expect(preflight.statusCode).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe(FRONTEND);
    expect(preflight.headers['access-control-allow-credentials']).toBe('true');
    // An OPTIONS of the front end's that is no preflight is answered as one, not with a 400 in plain text.
    const bare = await app.inject({ method: 'OPTIONS', url: '/api/auth/signin', headers: { origin: FRONTEND } });
    expect([bare.statusCode, bare.headers['access-control-allow-origin'], bare.body]).toEqual([204, FRONTEND, '']);
    const simple = await app.inject({ method: 'GET', url: '/health', headers: { origin: FRONTEND } });
    expect(simple.headers['access-control-allow-origin']).toBe(FRONTEND);
    // A fetched export's file name, the refusals' timing, and a 405's methods are readable by the page.
    expect(String(simple.headers['access-control-expose-headers']).split(/,\s*/)).toEqual(expect.arrayContaining(['Content-Disposition', 'Retry-After', 'X-Request-Id', 'Allow']));
  });

  it("lets the front end's origin send the request headers its libraries add (a preflight is not refused over them)", async () => {
    // A front end's HTTP client or error tracker adds headers of its own (Sentry's sentry-trace
    // and baggage, Cache-Control, X-Requested-With); with a fixed list, the browser refused every
    // such request after its preflight, before the API saw it.
    const requested = 'authorization,content-type,sentry-trace,baggage,cache-control,x-requested-with';
    const preflight = await app.inject({
      method: 'OPTIONS',
      url: '/api/feedback/get-feedback',
      headers: { origin: FRONTEND, 'access-control-request-method': 'GET', 'access-control-request-headers': requested },
    });
    expect(preflight.statusCode).toBe(204);
    expect(preflight.headers['access-control-allow-origin']).toBe(FRONTEND);
    const allowed = String(preflight.headers['access-control-allow-headers']).toLowerCase().split(/\s*,\s*/);
    expect(allowed).toEqual(expect.arrayContaining(requested.split(',')));
    // The answer depends on the headers asked for, so caches must keep them apart.
    expect(String(preflight.headers.vary).toLowerCase()).toContain('access-control-request-headers');
    // Another origin is still told nothing.
    const other = await app.inject({
      method: 'OPTIONS',
      url: '/api/feedback/get-feedback',
      headers: { origin: 'https://evil.example', 'access-control-request-method': 'GET', 'access-control-request-headers': requested },
    });
    expect(other.headers['access-control-allow-origin']).toBeUndefined();
    expect(other.headers['access-control-allow-headers']).toBeUndefined();
  });

  it('a JSON route refuses text/plain with 415, as any other type that is not JSON', async () => {
    for (const [url, payload] of [
      ['/api/auth/signin', JSON.stringify({ email: 'a@example.test', password: 'secret1' })],
      ['/api/feedback', 'hello'],
    ]) {
      const response = await app.inject({ method: 'POST', url, payload, headers: { 'content-type': 'text/plain;charset=UTF-8' } });
      expect(response.statusCode, url).toBe(415);
      expect(response.json(), url).toEqual({ success: false, error: 'Unsupported content type; send JSON with Content-Type: application/json', statusCode: 415 });
    }
    // An empty text/plain body is no body (`fetch(url, {method: 'POST', body: ''})`).
    const signout = await app.inject({ method: 'POST', url: '/api/auth/signout', payload: '', headers: { 'content-type': 'text/plain;charset=UTF-8', authorization: 'Bearer garbage' } });
    expect(signout.json()).toEqual({ success: false, error: 'No active session', statusCode: 401 });
  });

  it('gives any other origin no CORS headers', async () => {
    for (const origin of ['https://evil.example', 'http://localhost:5174', 'null']) {
      const response = await app.inject({ method: 'GET', url: '/health', headers: { origin } });
      expect(response.headers['access-control-allow-origin']).toBeUndefined();
      expect(response.headers['access-control-allow-credentials']).toBeUndefined();
    }
  });

  it("another origin's preflight is 403 naming CORS_ORIGIN, not a 404 for a route that exists", async () => {
    for (const origin of ['http://127.0.0.1:5173', 'https://evil.example']) {
      const response = await app.inject({
        method: 'OPTIONS',
        url: '/api/auth/signin',
        headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
      });
      expect(response.statusCode, origin).toBe(403);
      expect(response.json()).toEqual({ success: false, error: 'This origin may not call the API from a browser (CORS_ORIGIN)', statusCode: 403 });
      expect(response.headers['access-control-allow-origin']).toBeUndefined();
    }
    // The front end's own preflight is unchanged, and an OPTIONS that is no preflight is no concern of CORS.
    const own = await app.inject({ method: 'OPTIONS', url: '/api/auth/signin', headers: { origin: FRONTEND, 'access-control-request-method': 'POST' } });
    expect(own.statusCode).toBe(204);
    const plain = await app.inject({ method: 'OPTIONS', url: '/api/auth/signin', headers: { origin: 'https://evil.example' } });
    expect([plain.statusCode, plain.headers.allow]).toEqual([405, 'POST']);
  });

  it('API_DOCS=off serves no /docs (an operator who keeps the API surface unpublished); the API is unchanged', async () => {
    const quiet = await buildTestApp({ API_DOCS: 'off' });
    try {
      for (const url of ['/docs', '/docs/json', '/docs/static/index.html']) {
        const response = await quiet.inject({ method: 'GET', url });
        expect(response.statusCode, url).toBe(404);
      }
      expect((await quiet.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
    } finally {
      await quiet.close();
    }
    expect(() => testConfig({ API_DOCS: 'maybe' })).toThrowError(/API_DOCS is invalid \(must be on or off\)/);
  });

  it('serves an OpenAPI 3.1 document and Swagger UI at /docs', async () => {
    const spec = await app.inject({ method: 'GET', url: '/docs/json' });
    expect(spec.statusCode).toBe(200);
    expect(spec.json().openapi).toBe('3.1.0');
    expect(Object.keys(spec.json().paths)).toContain('/health');
    // Every operation documents the error body, for generated clients.
    const { components, paths } = spec.json();
    expect(components.schemas.ErrorResponse.required).toEqual(['success', 'error', 'statusCode']);
    const operations = Object.values(paths as Record<string, Record<string, { responses: Record<string, unknown> }>>).flatMap((path) => Object.values(path));
    expect(operations.length).toBeGreaterThan(30);
    const errorBody = { description: expect.any(String), content: { 'application/json': { schema: { $ref: '#/components/schemas/ErrorResponse' } } } };
    for (const operation of operations) {
      // Each refusal by its status (tests/openapi-precision.test.ts), and the ranges for what comes before any route.
      expect(operation.responses['4XX']).toEqual(errorBody);
      expect(operation.responses['5XX']).toEqual(errorBody);
    }
    const ui = await app.inject({ method: 'GET', url: '/docs/' });
    expect(ui.statusCode).toBe(200);
    expect(ui.headers['content-type']).toContain('text/html');
  });
});

/** Everything the server writes on `socket` until the connection closes. */
function readUntilClosed(socket: Socket): Promise<string> {
  let text = '';
  socket.on('data', (chunk) => (text += chunk));
  return new Promise((resolve) => socket.on('close', () => resolve(text)).on('error', () => {}));
}

describe("requests Node's HTTP parser refuses, or that do not finish arriving", () => {
  let app: FastifyInstance;
  let port: number;
  beforeAll(async () => {
    app = await buildTestApp({ REQUEST_TIMEOUT_MS: '1000' });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => app.close());

  /** Sends raw bytes and reads the whole answer: the server closes the connection after such an error. */
  async function rawAnswer(request: string): Promise<{ status: number; body: unknown }> {
    const socket = connect(port, '127.0.0.1');
    // The server resets a connection it stops reading mid-request; what it wrote first has arrived.
    const answer = readUntilClosed(socket);
    socket.end(request);
    const [head, body] = (await answer).split('\r\n\r\n');
    return { status: Number(head.split(' ')[1]), body: JSON.parse(body) };
  }

  it('answer in the envelope: a header too large is 431, a malformed request 400', async () => {
    const huge = await rawAnswer(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\n\r\n`);
    expect(huge).toEqual({ status: 431, body: { success: false, error: 'Request header fields too large', statusCode: 431 } });
    for (const request of ['FOO /health HTTP/1.1\r\nHost: x\r\n\r\n', 'GET /health HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n']) {
      expect(await rawAnswer(request)).toEqual({ status: 400, body: { success: false, error: 'Malformed HTTP request', statusCode: 400 } });
    }
    // And the server still serves.
    expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(200);
  });

  /** Sends `head`, then a byte every 200 ms, and reads whatever comes back until the server closes the connection (10 s at most). */
  async function trickle(head: string): Promise<{ text: string; closedAfterMs: number }> {
    const socket = connect(port, '127.0.0.1');
    const started = Date.now();
    const answer = readUntilClosed(socket);
    socket.write(head);
    const drip = setInterval(() => socket.writable && socket.write('a'), 200);
    const giveUp = setTimeout(() => socket.destroy(), 10_000);
    const text = await answer;
    clearInterval(drip);
    clearTimeout(giveUp);
    return { text, closedAfterMs: Date.now() - started };
  }

  it('a body sent a byte at a time is cut off at REQUEST_TIMEOUT_MS with 408 in the envelope', async () => {
    const { text, closedAfterMs } = await trickle('POST /api/auth/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{');
    const [head, body] = text.split('\r\n\r\n');
    expect(head.split('\r\n')[0]).toBe('HTTP/1.1 408 Request Timeout');
    expect(JSON.parse(body)).toEqual({ success: false, error: 'Request timeout', statusCode: 408 });
    // The deadline, then Node's check (every 250 ms here), not the test's 10 s.
    expect(closedAfterMs).toBeLessThan(5_000);
  });

  it('the rest of a refused body, still arriving, is read only until the deadline; the refusal is the only answer', async () => {
    const { text, closedAfterMs } = await trickle('POST /api/auth/signin HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n');
    expect(text.match(/HTTP\/1\.1 /g)).toHaveLength(1);
    expect(text.split('\r\n')[0]).toBe('HTTP/1.1 413 Payload Too Large');
    expect(closedAfterMs).toBeLessThan(5_000);
  });
});

describe('an answer its client does not take', () => {
  // Larger than what the kernel's buffers on both ends of a loopback connection hold.
  const size = 32 * 1024 * 1024;
  let app: FastifyInstance;
  let port: number;
  beforeAll(async () => {
    app = await buildTestApp({ REQUEST_TIMEOUT_MS: '1000' }, async (instance) => {
      instance.get('/test/large', async (_request, reply) => reply.type('application/octet-stream').send(Buffer.alloc(size, 97)));
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => app.close());

  /** Asks for the large answer and leaves it unread for `pauseMs`; then reads until the server closes the connection or 2 s pass without a byte. */
  async function takeLargeAnswer(pauseMs: number): Promise<{ received: number; closed: boolean }> {
    const socket = connect(port, '127.0.0.1');
    socket.pause();
    socket.write('GET /test/large HTTP/1.1\r\nHost: x\r\n\r\n');
    await new Promise((resolve) => setTimeout(resolve, pauseMs));
    let received = 0;
    let closed = false;
    await new Promise<void>((resolve) => {
      let quiet = setTimeout(resolve, 2_000);
      socket.on('data', (chunk: Buffer) => {
        received += chunk.length;
        clearTimeout(quiet);
        quiet = setTimeout(resolve, 2_000);
      });
      socket.on('close', () => {
        closed = true;
        clearTimeout(quiet);
        resolve();
      });
      socket.on('error', () => {});
      socket.resume();
    });
    socket.destroy();
    return { received, closed };
  }

  it('is cut, with its connection, when not taken in full within REQUEST_TIMEOUT_MS; a client that reads gets all of it', async () => {
    const stalled = await takeLargeAnswer(2_500);
    expect(stalled.closed).toBe(true);
    expect(stalled.received).toBeLessThan(size);
    // Headers and the whole body, on a connection kept open for the next request.
    const taken = await takeLargeAnswer(0);
    expect(taken.received).toBeGreaterThan(size);
    expect(taken.closed).toBe(false);
  });
});

describe('an unexpected failure in a route (SPEC section 7: any, 500)', () => {
  it('is answered 500 Internal server error with the request id, the cause only in the log', async () => {
    const { app, lines } = await buildTestAppWithLog({}, 'info', async (instance) => {
      instance.get('/test/broken', async () => {
        throw new TypeError('cannot read properties of undefined (reading "secret_column")');
      });
    });
    try {
      const answer = await app.inject({ method: 'GET', url: '/test/broken', headers: { 'x-request-id': 'broken-1' } });
      expect(answer.statusCode).toBe(500);
      expect(answer.json()).toEqual({ success: false, error: 'Internal server error', statusCode: 500, requestId: 'broken-1' });
      expect(answer.body).not.toContain('secret_column');
      // The operator gets what the client does not: the error, with its stack, at level error.
      const logged = lines.map((line) => JSON.parse(line)).filter((entry) => entry.requestId === 'broken-1' && entry.level >= 50);
      expect(logged).toHaveLength(1);
      expect(logged[0].err.message).toContain('secret_column');
      expect(logged[0].err.stack).toContain('TypeError');
      // Whole without its `http` line, which LOG_LEVEL=info (this app's) drops.
      expect(logged[0]).toMatchObject({ method: 'GET', route: '/test/broken', statusCode: 500 });
      expect(lines.join('')).not.toContain('request completed');
    } finally {
      await app.close();
    }
  });
});

describe('the log line of a refused request', () => {
  it('is one warn line that reads alone: method, route or URL, status, and why a 401; an unknown URL and a wrong method included', async () => {
    const { app, lines } = await buildTestAppWithLog({ CORS_ORIGIN: FRONTEND, METRICS_TOKEN: 'metrics-token-for-tests-0123456789' }, 'info');
    try {
      const key = `secret-${crypto.randomUUID()}`;
      const asked = [
        ['GET', '/wp-login.php?user=admin', 'unknown-1', 404],
        ['DELETE', '/health', 'method-1', 405],
        ['DELETE', `/api/websites/api-key/${key}`, 'method-2', 405],
        ['GET', '/api/feedback/get-feedback', 'signed-out-1', 401],
        ['GET', '/api/feedback/get-feedback', 'bad-token-1', 401],
        ['OPTIONS', '/api/auth/signin', 'cors-1', 403],
        ['GET', `/api/analytics?websiteId=${crypto.randomUUID()}&startDate=2026-03-01&endDate=2026-03-02`, 'api-key-1', 401],
        ['GET', '/metrics', 'metrics-1', 401],
      ] as const;
      const sent: Record<string, Record<string, string>> = {
        'bad-token-1': { authorization: 'Bearer not-a-jwt' },
        'api-key-1': { 'x-api-key': `unknown-${key}` },
        'metrics-1': { authorization: 'Bearer not-the-metrics-token-0123456789' },
        'cors-1': { origin: 'https://elsewhere.example', 'access-control-request-method': 'POST' },
      };
      for (const [method, url, requestId, status] of asked) {
        const answer = await app.inject({ method, url, headers: { 'x-request-id': requestId, ...sent[requestId] }, remoteAddress: '192.0.2.77' });
        expect(answer.statusCode, url).toBe(status);
        // Why a 401 was refused is the operator's: the client is told no more than the SPEC says.
        if (status === 401) expect(answer.json(), url).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
      }
      const refusals = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'request refused');
      expect(refusals.map((entry) => entry.requestId)).toEqual(asked.map(([, , requestId]) => requestId));
      const byId = Object.fromEntries(refusals.map((entry) => [entry.requestId, entry]));
      expect(byId['unknown-1']).toMatchObject({ level: 40, method: 'GET', statusCode: 404, url: '/wp-login.php?user=admin', ip: '192.0.2.77' });
      expect(byId['method-1']).toMatchObject({ level: 40, method: 'DELETE', statusCode: 405, url: '/health', ip: '192.0.2.77', allowed: ['GET', 'HEAD'] });
      // The answer names the path; the log takes it redacted, as every line does.
      expect(byId['method-2']).toMatchObject({ statusCode: 405, url: '/api/websites/api-key/[redacted]' });
      expect(lines.join('')).not.toContain(key);
      expect(byId['signed-out-1']).toMatchObject({
        level: 40,
        method: 'GET',
        route: '/api/feedback/get-feedback',
        statusCode: 401,
        error: 'Authentication required',
        reason: 'no bearer token',
      });
      expect(byId['bad-token-1']).toMatchObject({ statusCode: 401, reason: 'token refused: malformed token' });
      expect(byId['api-key-1']).toMatchObject({ statusCode: 401, reason: 'X-API-Key opens no website' });
      expect(byId['metrics-1']).toMatchObject({ statusCode: 401, reason: 'not the METRICS_TOKEN' });
      // A preflight from an origin that is not CORS_ORIGIN's: both named, so a wrong setting shows.
      expect(byId['cors-1']).toMatchObject({ statusCode: 403, reason: `CORS_ORIGIN is ${FRONTEND}; the preflight came from https://elsewhere.example` });
    } finally {
      await app.close();
    }
  });
});

describe('a request arriving on an open connection while the server closes', () => {
  it('is answered 503 in the envelope, with its request id and CORS headers, and the connection closed; logged as a refusal', async () => {
    let finishSlow = () => {};
    const slowStarted = Promise.withResolvers<void>();
    const { app, lines } = await buildTestAppWithLog({ CORS_ORIGIN: FRONTEND }, 'info', async (instance) => {
      instance.get('/test/slow', async () => {
        slowStarted.resolve();
        await new Promise<void>((resolve) => (finishSlow = resolve));
        return { finished: true };
      });
    });
    // What the document promises of /health's 503: a typed client reads this body through it.
    const documented = (await app.inject('/docs/json')).json().paths['/health'].get.responses['503'];
    await app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = app.server.address() as AddressInfo;
    // A request in flight keeps the server closing; the second connection is open before close begins.
    const slow = fetch(`http://127.0.0.1:${port}/test/slow`);
    await slowStarted.promise;
    const late = connect(port, '127.0.0.1');
    await new Promise((resolve) => late.once('connect', resolve));
    const lateAnswer = readUntilClosed(late);
    const closed = app.close();
    // preClose has run once the server stops listening.
    while (app.server.listening) await new Promise((resolve) => setTimeout(resolve, 10));
    late.write(`GET /health HTTP/1.1\r\nHost: x\r\nOrigin: ${FRONTEND}\r\nX-Request-Id: late-1\r\n\r\n`);
    const text = await lateAnswer;
    finishSlow();
    expect(await (await slow).json()).toEqual({ finished: true });
    await closed;
    const [head, body] = text.split('\r\n\r\n');
    const headers = head.toLowerCase().split('\r\n');
    expect(headers[0]).toBe('http/1.1 503 service unavailable');
    expect(headers).toEqual(expect.arrayContaining(['x-request-id: late-1', `access-control-allow-origin: ${FRONTEND}`, 'connection: close']));
    expect(JSON.parse(body)).toEqual({ success: false, error: 'Server is shutting down', statusCode: 503, requestId: 'late-1' });
    const schema = documented.content['application/json'].schema as { required: string[]; properties: Record<string, unknown> };
    expect(schema.required.filter((field) => !(field in JSON.parse(body)))).toEqual([]);
    expect(Object.keys(JSON.parse(body)).filter((field) => !(field in schema.properties))).toEqual([]);
    expect(documented.headers['Retry-After']).toMatchObject({ schema: { type: 'integer' } });
    // Expected at every deploy: a warning without a stack, not an error an alert would page for.
    const entries = lines.map((line) => JSON.parse(line)).filter((entry) => entry.requestId === 'late-1' && entry.level >= 40);
    expect(entries.map(({ level, msg, statusCode, error }) => ({ level, msg, statusCode, error }))).toEqual([
      { level: 40, msg: 'request refused', statusCode: 503, error: 'Server is shutting down' },
    ]);
  });
});

describe('health polled by many at once', () => {
  it('polls that arrive while a ping is under way, or within a second of its answer, share it: a flood costs one query', async () => {
    const app = await buildTestApp();
    try {
      const ping = vi.spyOn(app.db, 'ping');
      const flood = await Promise.all(Array.from({ length: 200 }, () => app.inject({ method: 'GET', url: '/health' })));
      expect(flood.map((response) => response.statusCode)).toEqual(Array(200).fill(200));
      expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
      expect(ping).toHaveBeenCalledTimes(1);
      await new Promise((resolve) => setTimeout(resolve, 1_100));
      expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
      expect(ping).toHaveBeenCalledTimes(2);
    } finally {
      await app.close();
    }
  });
});

describe('health with the database unreachable', () => {
  it('answers 503 with status error; the error is logged once a minute, however often it is asked', async () => {
    // Nothing listens on port 1: every connection is refused.
    const { app, lines } = await buildTestAppWithLog({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' }, 'info');
    try {
      for (let poll = 0; poll < 3; poll += 1) {
        const response = await app.inject({ method: 'GET', url: '/health' });
        expect(response.statusCode).toBe(503);
        expect(response.json()).toMatchObject({ success: false, status: 'error', statusCode: 503 });
        expect(response.headers['retry-after']).toBe('5');
      }
      const errors = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg === 'health check: database unreachable');
      expect(errors.map((entry) => entry.level)).toEqual([50]);
    } finally {
      await app.close();
    }
  });
});

describe('the 405 check and OPTIONS routes', () => {
  it('leaves an OPTIONS route alone, even one registered after the errors plugin on a path that takes any value', async () => {
    // The app's CORS preflight (`OPTIONS *`) is registered after the errors plugin. Were OPTIONS
    // routes checked like the others, a preflight for a path written out for POST alone would be 405.
    const app = Fastify(PATH_MATCHING);
    await app.register(errorsPlugin);
    app.post('/things/new', async () => ({ made: true }));
    app.get('/things/:id', async () => ({ got: true }));
    app.options('/things/*', async (_request, reply) => reply.status(204).header('x-preflight', 'answered').send());
    await app.ready();
    try {
      const preflight = await app.inject({ method: 'OPTIONS', url: '/things/new' });
      expect([preflight.statusCode, preflight.headers['x-preflight']]).toEqual([204, 'answered']);
      // The check itself still runs for the other methods.
      const wrongMethod = await app.inject({ method: 'GET', url: '/things/new' });
      expect([wrongMethod.statusCode, wrongMethod.headers.allow]).toEqual([405, 'POST']);
    } finally {
      await app.close();
    }
  });
});
