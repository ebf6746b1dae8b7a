import { brotliDecompressSync, gunzipSync } from 'node:zlib';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildTestApp } from './support/app.ts';

// The OpenAPI document (/docs/json, /docs/yaml; src/plugins/docs-assets.ts):
// about 210 KB of JSON, sent compressed to a client that takes it, serialized
// and compressed once per process, each encoding with a strong ETag of its own.

const BROWSER = 'gzip, deflate, br, zstd';
const DECODE: Record<string, (body: Buffer) => Buffer> = { br: brotliDecompressSync, gzip: gunzipSync, identity: (body) => body };

/** An answer's headers but those that differ from one answer to the next whatever the request. */
function lastingHeaders({ headers }: LightMyRequestResponse) {
  const { date: _date, 'x-request-id': _requestId, ...rest } = headers;
  return rest;
}

describe.each([
  { url: '/docs/json', contentType: 'application/json; charset=utf-8', text: (app: FastifyInstance) => JSON.stringify(app.swagger()) },
  { url: '/docs/yaml', contentType: 'application/x-yaml', text: (app: FastifyInstance) => app.swagger({ yaml: true }) },
])('$url', ({ url, contentType, text }) => {
  let app: FastifyInstance;
  /** What @fastify/swagger-ui's own handler sends: the document as the plugin makes it, uncompressed. */
  let document: Buffer;
  beforeAll(async () => {
    app = await buildTestApp();
    document = Buffer.from(text(app));
  });
  afterAll(async () => app?.close());

  it('is sent in Brotli, gzip or as it is, per Accept-Encoding, each decoding to the document byte for byte', async () => {
    const cases = [
      [BROWSER, 'br'],
      ['gzip', 'gzip'],
      ['br;q=0.5, gzip;q=0.8', 'gzip'],
      [undefined, 'identity'],
      ['identity', 'identity'],
      ['br;q=0, gzip;q=0', 'identity'],
    ] as const;
    for (const [acceptEncoding, encoding] of cases) {
      const answer = await app.inject({ url, headers: acceptEncoding ? { 'accept-encoding': acceptEncoding } : {} });
      const label = `Accept-Encoding: ${acceptEncoding}`;
      expect(answer.statusCode, label).toBe(200);
      expect(answer.headers['content-encoding'], label).toBe(encoding === 'identity' ? undefined : encoding);
      expect(answer.headers['content-type'], label).toBe(contentType);
      // Added to what the CORS plugin says it varies by, identity answers too.
      expect(answer.headers.vary, label).toBe('Origin, Accept-Encoding');
      expect(Number(answer.headers['content-length']), label).toBe(answer.rawPayload.length);
      expect(DECODE[encoding](answer.rawPayload).equals(document), label).toBe(true);
      if (encoding !== 'identity') expect(answer.rawPayload.length, label).toBeLessThan(document.length / 10);
    }
  });

  it('answers HEAD with the headers GET sends for the same Accept-Encoding, and no body', async () => {
    for (const acceptEncoding of [BROWSER, 'gzip', 'identity']) {
      const request = { url, headers: { 'accept-encoding': acceptEncoding } };
      const get = await app.inject({ ...request, method: 'GET' });
      const head = await app.inject({ ...request, method: 'HEAD' });
      expect(head.statusCode, acceptEncoding).toBe(200);
      expect(lastingHeaders(head), acceptEncoding).toEqual(lastingHeaders(get));
      expect(Number(head.headers['content-length']), acceptEncoding).toBe(get.rawPayload.length);
      expect(head.rawPayload.length, acceptEncoding).toBe(0);
    }
  });

  it('tags each encoding with a strong ETag of its own, and answers 304 to the tag of the encoding asked for only', async () => {
    const etags = new Map<string, string>();
    for (const acceptEncoding of [BROWSER, 'gzip', 'identity']) {
      const first = await app.inject({ url, headers: { 'accept-encoding': acceptEncoding } });
      const etag = String(first.headers.etag);
      expect(etag, acceptEncoding).toMatch(/^"[\w-]+"$/);
      expect((await app.inject({ url, headers: { 'accept-encoding': acceptEncoding } })).headers.etag, acceptEncoding).toBe(etag);
      etags.set(acceptEncoding, etag);
      for (const method of ['GET', 'HEAD'] as const) {
        for (const ifNoneMatch of [etag, `W/${etag}`, `"other", ${etag}`, '*']) {
          const again = await app.inject({ method, url, headers: { 'accept-encoding': acceptEncoding, 'if-none-match': ifNoneMatch } });
          expect(again.statusCode, `${method} ${acceptEncoding} If-None-Match: ${ifNoneMatch}`).toBe(304);
          expect(again.headers.etag).toBe(etag);
          expect(again.headers.vary).toBe('Origin, Accept-Encoding');
          expect(again.rawPayload.length).toBe(0);
        }
      }
    }
    expect(new Set(etags.values()).size).toBe(3);
    // A copy cached in gzip does not stand for the Brotli one, nor the other way round.
    const stale = await app.inject({ url, headers: { 'accept-encoding': BROWSER, 'if-none-match': etags.get('gzip')! } });
    expect(stale.statusCode).toBe(200);
    expect(stale.headers['content-encoding']).toBe('br');
    expect(brotliDecompressSync(stale.rawPayload).equals(document)).toBe(true);
  });
});

describe('the OpenAPI document, kept', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp();
  });
  afterAll(async () => app?.close());

  it('is serialized once per process, whatever the encodings asked for and however many ask at once', async () => {
    const swagger = vi.spyOn(app, 'swagger');
    const encodings = [BROWSER, 'gzip', 'identity'];
    const first = await Promise.all(Array.from({ length: 9 }, (_, i) => app.inject({ url: '/docs/json', headers: { 'accept-encoding': encodings[i % 3] } })));
    const later = await Promise.all(encodings.map((acceptEncoding) => app.inject({ url: '/docs/json', headers: { 'accept-encoding': acceptEncoding } })));
    expect([...first, ...later].map((answer) => answer.statusCode)).toEqual(Array(12).fill(200));
    // Each encoding's answers are one copy's bytes.
    for (const [i, answer] of later.entries()) expect(answer.rawPayload.equals(first[i].rawPayload)).toBe(true);
    expect(swagger).toHaveBeenCalledTimes(1);
    swagger.mockRestore();
  });
});
