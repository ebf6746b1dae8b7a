import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';

describe('GET /script.js', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp();
  });
  afterAll(async () => app?.close());

  it('serves the tracker as cacheable JavaScript with an ETag, and 304 when it matches', async () => {
    const response = await app.inject({ method: 'GET', url: '/script.js' });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(response.headers['cache-control']).toBe('public, max-age=3600');
    expect(response.headers['cross-origin-resource-policy']).toBe('cross-origin');
    // Any site may load it in CORS mode (a crossorigin attribute, Subresource Integrity).
    expect(response.headers['access-control-allow-origin']).toBe('*');
    expect(response.body.startsWith('(function () {')).toBe(true);
    // Served without comments or indentation, about 6 KB.
    expect(response.body).not.toMatch(/^\s|\n\s|\n\/\//);
    expect(response.body.length).toBeLessThan(6_656);
    const etag = String(response.headers.etag);
    expect(etag).toMatch(/^"[\w-]+"$/);
    const again = await app.inject({ method: 'GET', url: '/script.js', headers: { 'if-none-match': etag } });
    expect(again.statusCode).toBe(304);
    expect(again.body).toBe('');
    // A browser stores the 304's headers with the cached script: as JSON, with nosniff, it would never run again.
    expect(again.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(again.headers.etag).toBe(etag);
    expect(again.headers['content-length']).toBeUndefined();
    const weak = await app.inject({ method: 'GET', url: '/script.js', headers: { 'if-none-match': `"other", W/${etag}` } });
    expect(weak.statusCode).toBe(304);
    const stale = await app.inject({ method: 'GET', url: '/script.js', headers: { 'if-none-match': '"stale"' } });
    expect(stale.statusCode).toBe(200);
  });

  it('leaves the front end its own CORS answer, with credentials, and varies on Origin', async () => {
    const own = await app.inject({ method: 'GET', url: '/script.js', headers: { origin: 'http://localhost:5173' } });
    expect(own.headers['access-control-allow-origin']).toBe('http://localhost:5173');
    expect(own.headers['access-control-allow-credentials']).toBe('true');
    const other = await app.inject({ method: 'GET', url: '/script.js', headers: { origin: 'https://portfolio.example.org' } });
    expect(other.headers['access-control-allow-origin']).toBe('*');
    expect(other.headers['access-control-allow-credentials']).toBeUndefined();
    for (const response of [own, other]) expect(String(response.headers.vary)).toMatch(/origin/i);
  });
});
