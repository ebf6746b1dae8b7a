import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LOGO_STYLE_HASH } from '../src/plugins/openapi.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp, TEST_JWT_SECRET } from './support/app.ts';

// The published OpenAPI document (/docs/json) says what the routes do: the
// SPEC's URLs, the bodies' required fields, the media types that are really
// sent and accepted, and a summary for every operation.

type Schema = {
  type?: unknown;
  format?: string;
  required?: string[];
  properties?: Record<string, Schema>;
  minLength?: number;
  maxLength?: number;
  description?: string;
  anyOf?: Schema[];
  additionalProperties?: unknown;
  $ref?: string;
};
type Operation = {
  operationId?: string;
  summary?: string;
  parameters?: { name: string; in: string; required?: boolean; description?: string; schema: Schema }[];
  description?: string;
  requestBody?: { content: Record<string, { schema: Schema }> };
  responses: Record<string, { headers?: Record<string, { description?: string; schema: Schema }>; content?: Record<string, { schema: Schema }> }>;
};
type Document = {
  servers?: { url: string }[];
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema> };
};

describe('the OpenAPI document', () => {
  let app: FastifyInstance;
  let document: Document;
  const operation = (method: string, path: string) => {
    const found = document.paths[path]?.[method];
    expect(found, `${method.toUpperCase()} ${path} is documented`).toBeDefined();
    return found!;
  };
  const bodyOf = (method: string, path: string) => operation(method, path).requestBody!.content['application/json'].schema;

  beforeAll(async () => {
    app = await buildTestApp();
    const answer = await app.inject('/docs/json');
    expect(answer.statusCode).toBe(200);
    document = answer.json();
  });
  afterAll(async () => app?.close());

  it('writes the routes under a prefix without a trailing slash, as the SPEC does, and each of them answers there', async () => {
    const paths = Object.keys(document.paths);
    expect(paths.filter((path) => path.length > 1 && path.endsWith('/'))).toEqual([]);
    const expected = {
      '/api/analytics': ['get', 'post'],
      '/api/websites': ['get', 'post'],
      '/api/users': ['post'],
      '/api/admin/logs': ['get', 'post'],
      '/api/admin/users': ['get'],
    };
    for (const [path, methods] of Object.entries(expected)) {
      for (const method of methods) {
        // Each is still its own operation: none overwrote another.
        expect(operation(method, path).summary).toEqual(expect.any(String));
        const answer = await app.inject({ method: method.toUpperCase() as 'GET', url: path, payload: method === 'get' ? undefined : {} });
        expect(answer.statusCode, `${method} ${path}`).not.toBe(404);
      }
    }
    expect(operation('get', '/api/analytics').summary).not.toBe(operation('post', '/api/analytics').summary);
  });

  it('names the server as relative to the document, so a client reaches the API on the host it read /docs/json from', async () => {
    expect(document.servers?.map((server) => server.url)).toEqual(['/']);
    // OpenAPI 3: a relative server URL is read against the URL the document was fetched from.
    const server = new URL(document.servers![0].url, 'https://api.example.org/docs/json');
    const operationUrl = new URL(`${server.pathname.replace(/\/$/, '')}/api/websites`, server);
    expect(operationUrl.href).toBe('https://api.example.org/api/websites');
    expect((await app.inject({ url: operationUrl.pathname })).statusCode).not.toBe(404);
  });

  it('gives every operation a summary, and the auth routes a description of their refusals', () => {
    for (const [path, item] of Object.entries(document.paths)) {
      for (const [method, found] of Object.entries(item)) {
        expect(found.summary, `${method.toUpperCase()} ${path}`).toEqual(expect.stringMatching(/\S/));
        if (path.startsWith('/api/auth/')) expect(found.description, `${method.toUpperCase()} ${path}`).toEqual(expect.stringMatching(/\d{3} /));
      }
    }
    expect(Object.keys(document.paths).filter((path) => path.startsWith('/api/auth/'))).toHaveLength(8);
  });

  it('lists the required fields of sign in, reset and update password as strings, although the routes answer missing ones themselves', async () => {
    const bodies = {
      '/api/auth/signin': ['email', 'password'],
      '/api/auth/reset-password': ['email'],
      '/api/auth/update-password': ['token', 'newPassword'],
    };
    for (const [path, fields] of Object.entries(bodies)) {
      const body = bodyOf('post', path);
      expect(body.required, path).toEqual(fields);
      for (const field of fields) expect(body.properties![field].type, `${path} ${field}`).toBe('string');
    }
    expect(bodyOf('post', '/api/auth/reset-password').properties!.email).toMatchObject({ format: 'email', maxLength: 254 });
    // What the document calls required is still answered with the SPEC's own messages.
    const signIn = await app.inject({ method: 'POST', url: '/api/auth/signin', payload: { email: 'someone@example.com' } });
    expect(signIn.json()).toMatchObject({ statusCode: 400, error: 'Email and password are required' });
    const reset = await app.inject({ method: 'POST', url: '/api/auth/reset-password', payload: { email: null } });
    expect(reset.json()).toMatchObject({ statusCode: 400, error: 'Email is required' });
  });

  it('documents the new password as the routes check it: 6 characters to 72 bytes', () => {
    const newPassword = bodyOf('post', '/api/auth/update-password').properties!.newPassword;
    expect(newPassword).toMatchObject({ type: 'string', minLength: 6, maxLength: 72 });
    expect(newPassword.description).toContain('72 bytes');
    const signUpPassword = bodyOf('post', '/api/auth/signup').properties!.password;
    expect(signUpPassword).toMatchObject({ minLength: 6, maxLength: 72 });
    expect(signUpPassword.description).toContain('72 bytes');
  });

  it('documents the timestamps of the auth answers as date-times', () => {
    const user = (path: string, method: string, status: string) =>
      operation(method, path).responses[status].content!['application/json'].schema.properties!.data.properties!;
    const timestamps = [
      user('/api/auth/signup', 'post', '201').user.properties!.createdAt,
      user('/api/auth/signin', 'post', '200').user.properties!.lastLogin,
      user('/api/auth/me', 'get', '200').createdAt,
      user('/api/auth/me', 'get', '200').lastLogin,
    ];
    for (const timestamp of timestamps) expect(JSON.stringify(timestamp)).toContain('"format":"date-time"');
  });

  it('names the media types that are really sent: the tracker script and the screenshot', async () => {
    const script = operation('get', '/script.js').responses['200'].content!;
    expect(Object.keys(script)).toEqual(['text/javascript']);
    const served = await app.inject('/script.js');
    expect(served.headers['content-type']).toBe('text/javascript; charset=utf-8');

    const screenshot = operation('get', '/api/feedback/{id}/screenshot').responses['200'].content!;
    expect(Object.keys(screenshot)).toEqual(['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/avif', 'application/octet-stream']);
    expect(screenshot['image/png'].schema).toMatchObject({ type: 'string', format: 'binary' });
  });

  it('lists text/plain beside application/json for recording an event (sendBeacon)', () => {
    const content = operation('post', '/api/analytics').requestBody!.content;
    expect(Object.keys(content)).toEqual(['application/json', 'text/plain']);
    expect(content['text/plain'].schema).toEqual(content['application/json'].schema);
  });

  it('shows what refines and pipes check: e-mail formats, date days, the API key header, and the one field a change needs', () => {
    for (const [method, path] of [
      ['post', '/api/auth/signup'],
      ['post', '/api/users'],
      ['put', '/api/users/{id}'],
    ] as const) {
      expect(bodyOf(method, path).properties!.email, `${method} ${path}`).toMatchObject({ format: 'email', maxLength: 254 });
    }
    // Feedback takes letters of any script and quoted local parts, which `email` validators refuse.
    expect(bodyOf('post', '/api/feedback').properties!.email).toMatchObject({ format: 'idn-email', maxLength: 254 });
    const parameter = (method: string, path: string, name: string) => operation(method, path).parameters!.find((found) => found.name === name)!;
    expect(parameter('get', '/api/users/email/{email}', 'email').schema).toMatchObject({ format: 'email' });
    for (const name of ['startDate', 'endDate']) {
      const day = parameter('get', '/api/analytics', name);
      expect(day.schema).toMatchObject({ format: 'date' });
      expect(day.description).toContain('1970-01-01');
    }
    expect(parameter('get', '/api/websites/api-key', 'x-api-key')).toMatchObject({ in: 'header', required: true });
    const oneOf = (method: string, path: string) => bodyOf(method, path).anyOf!.map((branch) => branch.required);
    expect(oneOf('put', '/api/users/{id}')).toEqual([['name'], ['email']]);
    expect(oneOf('put', '/api/websites/{id}')).toEqual([['name'], ['domain'], ['settings'], ['metadata']]);
    expect(oneOf('put', '/api/feedback/{id}')).toEqual([['status'], ['adminNotes'], ['resolvedBy']]);
    expect(bodyOf('post', '/api/feedback').properties!.captchaToken.description).toContain('Bot verification failed');
  });

  it('says when an error carries details, and names the key the server files a whole-body problem under', async () => {
    const details = document.components.schemas.ErrorResponse.properties!.details.description!;
    expect(details).toContain('Validation failed');
    expect(details).toContain('newPassword');
    // A body that is not an object concerns no one field: the description must name the key it is really under.
    const answer = await app.inject({ method: 'POST', url: '/api/feedback', headers: { 'content-type': 'application/json' }, payload: '[1,2]' });
    expect(answer.statusCode).toBe(400);
    const keys = Object.keys(answer.json().details);
    expect(keys).toEqual(['body']);
    expect(details).toContain(`\`${keys[0]}\``);
  });

  it('names every operation once, by its method and path, for client generators', () => {
    const ids = Object.entries(document.paths).flatMap(([path, operations]) =>
      Object.entries(operations).map(([method, found]) => ({ path, method, id: found.operationId })),
    );
    expect(ids.filter(({ id }) => typeof id !== 'string' || !/^[a-z]+[A-Za-z0-9]*$/.test(id))).toEqual([]);
    expect(new Set(ids.map(({ id }) => id)).size).toBe(ids.length);
    const idOf = (method: string, path: string) => ids.find((entry) => entry.method === method && entry.path === path)?.id;
    expect(idOf('post', '/api/auth/signin')).toBe('postAuthSignin');
    expect(idOf('get', '/api/feedback/{id}/screenshot')).toBe('getFeedbackByIdScreenshot');
    expect(idOf('get', '/api/get-feedback')).toBe('getGetFeedback');
    expect(idOf('post', '/api/analytics')).toBe('postAnalytics');
    expect(idOf('get', '/health')).toBe('getHealth');
  });

  it('leaves out the HTML pages, what serves only them, and /metrics', () => {
    const left = Object.keys(document.paths).filter((path) => path.startsWith('/admin/') || path.startsWith('/docs') || path === '/metrics');
    expect(left).toEqual([]);
  });

  /** Top-level keys only: every required field is there, and none the schema does not list when it closes the object. */
  const fitsTopLevel = (schema: Schema, body: Record<string, unknown>) => {
    const resolved = schema.$ref ? document.components.schemas[schema.$ref.split('/').pop()!] : schema;
    const missing = (resolved.required ?? []).filter((field) => !(field in body));
    const unlisted = resolved.additionalProperties === false ? Object.keys(body).filter((field) => !(field in resolved.properties!)) : [];
    return { missing, unlisted };
  };

  it("documents the admin health 503 as what it also is: the guard's error body, when the caller cannot be checked", async () => {
    // Nothing listens on port 1: the guard cannot check the session and answers 503 itself, before the report is made.
    const unreachable = await buildTestApp({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' });
    try {
      const token = await new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: crypto.randomUUID(), email: 'admin@example.test' })
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .setSubject(crypto.randomUUID())
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(TEST_JWT_SECRET));
      const answer = await unreachable.inject({ method: 'GET', url: '/api/admin/health', headers: { authorization: `Bearer ${token}` } });
      expect(answer.statusCode).toBe(503);
      const schema = operation('get', '/api/admin/health').responses['503'].content!['application/json'].schema;
      expect(fitsTopLevel(schema, answer.json())).toEqual({ missing: [], unlisted: [] });
    } finally {
      await unreachable.close();
    }
  });

  it('documents the Retry-After header that comes with a 429', async () => {
    const limited = await buildTestApp({ RATE_LIMIT_GENERAL_PER_15MIN: '1' });
    try {
      await limited.inject('/api/websites');
      const refused = await limited.inject('/api/websites');
      expect(refused.statusCode).toBe(429);
      expect(Number(refused.headers['retry-after'])).toBe(refused.json().retryAfter);
    } finally {
      await limited.close();
    }
    const refusals = operation('get', '/api/websites').responses['429'];
    expect(refusals.headers?.['Retry-After']?.schema).toMatchObject({ type: 'integer' });
  });

  it('documents the Retry-After header that comes with every 503', async () => {
    const unreachable = await buildTestApp({ DATABASE_URL: 'postgres://postgres@127.0.0.1:1/nowhere' });
    try {
      const unavailable = await unreachable.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: await legacyAdmin() });
      const health = await unreachable.inject('/health');
      expect([unavailable.statusCode, unavailable.headers['retry-after'], health.statusCode, health.headers['retry-after']]).toEqual([503, '5', 503, '5']);
      expect(fitsTopLevel(operation('get', '/health').responses['503'].content!['application/json'].schema, health.json())).toEqual({ missing: [], unlisted: [] });
    } finally {
      await unreachable.close();
    }
    for (const answer of [operation('get', '/api/feedback/get-feedback').responses['503'], operation('get', '/health').responses['503'], operation('get', '/api/admin/health').responses['503']]) {
      expect(answer.headers?.['Retry-After']?.schema).toMatchObject({ type: 'integer' });
    }
  });

  it("documents the limits of an analytics event's page and metadata", async () => {
    const event = bodyOf('post', '/api/analytics');
    expect(event.properties!.page).toMatchObject({ maxLength: 2048 });
    const tooLong = await app.inject({
      method: 'POST',
      url: '/api/analytics',
      payload: { websiteId: crypto.randomUUID(), eventType: 'page_view', page: `/${'a'.repeat(2048)}`, userAgent: 'Mozilla/5.0 (X11; Linux x86_64) Chrome/120', sessionId: 's' },
    });
    expect(tooLong.json()).toMatchObject({ statusCode: 400, details: { page: ['Page must be at most 2048 bytes as UTF-8'] } });
    expect(JSON.stringify(event.properties!.metadata)).toContain('4096 bytes');
  });

  it('names who may call each websites and analytics route, as the other modules do in their summaries', () => {
    const who = {
      'post /api/websites': '(editor or admin)',
      'get /api/websites': '(viewer, editor or admin)',
      'get /api/websites/{id}': '(viewer, editor or admin)',
      'put /api/websites/{id}': '(editor or admin)',
      'post /api/websites/{id}/api-key': '(editor or admin)',
      'delete /api/websites/{id}': '(admin)',
      'get /api/analytics': "(viewer, editor or admin, or the website's API key)",
      'get /api/analytics/website/{websiteId}': "(viewer, editor or admin, or the website's API key)",
      'get /api/analytics/realtime': "(viewer, editor or admin, or a website's API key)",
      'get /api/analytics/date-range': "(viewer, editor or admin, or the website's API key)",
    };
    for (const [key, words] of Object.entries(who)) {
      const [method, path] = key.split(' ');
      expect(operation(method, path).summary, key).toContain(words);
    }
  });
});


describe("the /docs explorer's Content-Security-Policy", () => {
  it("allows the one inline <style> the installed explorer writes, by its hash: a changed bundle fails here", async () => {
    // Every <style> the explorer's scripts create as React elements, found in the files /docs serves.
    const staticDir = join(dirname(createRequire(import.meta.url).resolve('@fastify/swagger-ui')), 'static');
    const styles: string[] = [];
    for (const file of ['swagger-ui-bundle.js', 'swagger-ui-standalone-preset.js']) {
      const source = await readFile(join(staticDir, file), 'utf8');
      for (const [, text] of source.matchAll(/createElement\("style",null,("(?:[^"\\]|\\.)*")\)/g)) styles.push(JSON.parse(text) as string);
    }
    expect(styles).toEqual(['.logo_small_svg__cls-2{fill:#fff}.logo_small_svg__cls-3{fill:#85ea2d}']);
    expect(styles.map((text) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`)).toEqual([LOGO_STYLE_HASH]);
  });

  it("sends that hash in style-src, and never 'unsafe-inline', in test and in production", async () => {
    for (const NODE_ENV of ['test', 'production'] as const) {
      const app = await buildTestApp({ NODE_ENV });
      try {
        for (const url of ['/docs', '/docs/static/index.html']) {
          const csp = String((await app.inject(url)).headers['content-security-policy']);
          expect(/style-src ([^;]*)/.exec(csp)?.[1], `${NODE_ENV} ${url}`).toBe(`'self' https: ${LOGO_STYLE_HASH}`);
          expect(csp, `${NODE_ENV} ${url}`).not.toContain('unsafe-inline');
        }
      } finally {
        await app.close();
      }
    }
  });
});
