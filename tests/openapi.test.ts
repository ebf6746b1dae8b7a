import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';

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
};
type Operation = {
  summary?: string;
  parameters?: { name: string; in: string; required?: boolean; description?: string; schema: Schema }[];
  description?: string;
  requestBody?: { content: Record<string, { schema: Schema }> };
  responses: Record<string, { content?: Record<string, { schema: Schema }> }>;
};
type Document = { paths: Record<string, Record<string, Operation>>; components: { schemas: Record<string, Schema> } };

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
      ['post', '/api/feedback'],
    ] as const) {
      expect(bodyOf(method, path).properties!.email, `${method} ${path}`).toMatchObject({ format: 'email', maxLength: 254 });
    }
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

  it('says when an error carries details, and what `_` is', () => {
    const details = document.components.schemas.ErrorResponse.properties!.details.description!;
    expect(details).toContain('Validation failed');
    expect(details).toContain('newPassword');
    expect(details).toContain('`_`');
  });

  it('leaves out the HTML pages, what serves only them, and /metrics', () => {
    const left = Object.keys(document.paths).filter((path) => path.startsWith('/admin/') || path.startsWith('/docs') || path === '/metrics');
    expect(left).toEqual([]);
  });
});
