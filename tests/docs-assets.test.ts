import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { preferredEncoding } from '../src/plugins/docs-assets.ts';
import { buildTestApp } from './support/app.ts';

// The /docs explorer's static files, compressed for clients that take it
// (src/plugins/docs-assets.ts): the bundle is 1.68 MB as installed.

const STATIC_DIR = join(dirname(createRequire(import.meta.url).resolve('@fastify/swagger-ui')), 'static');
const BUNDLE = '/docs/static/swagger-ui-bundle.js';

describe('the /docs static files', () => {
  let app: FastifyInstance;
  let installed: Buffer;
  beforeAll(async () => {
    app = await buildTestApp();
    installed = await readFile(join(STATIC_DIR, 'swagger-ui-bundle.js'));
  });
  afterAll(async () => app?.close());

  it('answer the bundle in Brotli to a browser, a quarter of its size, decoding to the installed bytes', async () => {
    const response = await app.inject({ method: 'GET', url: BUNDLE, headers: { 'accept-encoding': 'gzip, deflate, br, zstd' } });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-encoding']).toBe('br');
    // Added to what the CORS plugin says it varies by, not in its place.
    expect(response.headers.vary).toBe('Origin, Accept-Encoding');
    expect(response.headers['content-type']).toMatch(/javascript/);
    expect(response.headers['accept-ranges']).toBeUndefined();
    expect(Number(response.headers['content-length'])).toBe(response.rawPayload.length);
    expect(response.rawPayload.length).toBeLessThan(installed.length / 4);
    expect(brotliDecompressSync(response.rawPayload).equals(installed)).toBe(true);
  });

  it('answer gzip to a client that takes only gzip, and every file the same way (the stylesheet too)', async () => {
    const response = await app.inject({ method: 'GET', url: BUNDLE, headers: { 'accept-encoding': 'gzip' } });
    expect(response.headers['content-encoding']).toBe('gzip');
    expect(gunzipSync(response.rawPayload).equals(installed)).toBe(true);
    const css = await app.inject({ method: 'GET', url: '/docs/static/swagger-ui.css', headers: { 'accept-encoding': 'gzip;q=1, br;q=0.5' } });
    expect(css.headers['content-encoding']).toBe('gzip');
    expect(css.headers['content-type']).toMatch(/text\/css/);
    expect(gunzipSync(css.rawPayload).equals(await readFile(join(STATIC_DIR, 'swagger-ui.css')))).toBe(true);
  });

  it('answer the installed bytes to a client that takes no compression, still saying they vary by it', async () => {
    for (const headers of [{}, { 'accept-encoding': 'identity' }, { 'accept-encoding': 'br;q=0, gzip;q=0' }]) {
      const response = await app.inject({ method: 'GET', url: BUNDLE, headers });
      expect(response.statusCode).toBe(200);
      expect(response.headers['content-encoding']).toBeUndefined();
      expect(response.headers.vary).toMatch(/accept-encoding/i);
      expect(response.rawPayload.equals(installed)).toBe(true);
    }
  });

  it('answer HEAD with the headers GET sends for the same Accept-Encoding, and no body', async () => {
    // Date and X-Request-Id differ from one answer to the next whatever the method.
    const headersOf = ({ headers }: { headers: Record<string, unknown> }) => {
      const { date: _date, 'x-request-id': _requestId, ...rest } = headers;
      return rest;
    };
    for (const url of [BUNDLE, '/docs/static/swagger-ui.css']) {
      for (const [acceptEncoding, expected] of [['gzip, deflate, br, zstd', 'br'], ['gzip', 'gzip'], ['identity', undefined]] as const) {
        const request = { url, headers: { 'accept-encoding': acceptEncoding } };
        const get = await app.inject({ ...request, method: 'GET' });
        const head = await app.inject({ ...request, method: 'HEAD' });
        expect(head.statusCode, `${url} ${acceptEncoding}`).toBe(200);
        expect(head.headers['content-encoding'], `${url} ${acceptEncoding}`).toBe(expected);
        expect(headersOf(head), `${url} ${acceptEncoding}`).toEqual(headersOf(get));
        expect(Number(head.headers['content-length']), `${url} ${acceptEncoding}`).toBe(get.rawPayload.length);
        expect(head.rawPayload.length, `${url} ${acceptEncoding}`).toBe(0);
      }
    }
  });

  it('leave a range request to the static server (206, not compressed)', async () => {
    const response = await app.inject({ method: 'GET', url: BUNDLE, headers: { 'accept-encoding': 'br', range: 'bytes=0-99' } });
    expect(response.statusCode).toBe(206);
    expect(response.headers['content-encoding']).toBeUndefined();
    expect(response.rawPayload.equals(installed.subarray(0, 100))).toBe(true);
  });
});

describe('preferredEncoding', () => {
  it('takes the higher weight of br and gzip, br on a tie, and none when both are refused', () => {
    expect(preferredEncoding(undefined)).toBeUndefined();
    expect(preferredEncoding('gzip, deflate, br')).toBe('br');
    expect(preferredEncoding('gzip')).toBe('gzip');
    expect(preferredEncoding('br;q=0.5, gzip;q=0.8')).toBe('gzip');
    expect(preferredEncoding('*')).toBe('br');
    expect(preferredEncoding('*;q=0, gzip')).toBe('gzip');
    expect(preferredEncoding('identity')).toBeUndefined();
    expect(preferredEncoding('br;q=0, gzip;q=0')).toBeUndefined();
  });
});
