import { createHash } from 'node:crypto';
import { readdir, readFile, stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { promisify } from 'node:util';
import zlib from 'node:zlib';
import type { FastifyInstance } from 'fastify';

// The /docs explorer's scripts and styles, compressed for clients that take
// it, and sent from one copy in memory shared by every client. As installed,
// @fastify/swagger-ui streams each from its file: 2.5 MB a page view (the
// bundle alone 1.68 MB), and each client that stops reading held about 300
// KiB of the server's memory (its own file stream and buffers); a shared
// Buffer written to a socket is not copied, so a stalled client now holds
// about 35 KiB whatever it asked for. Each file is read, and compressed,
// once, on the first request that asks for that encoding, off the event
// loop: compressing per request (as @fastify/compress does) costs about 130
// ms of CPU for the bundle in Brotli (quality 4) and 36 ms in gzip, where a
// kept copy costs nothing. Brotli at quality 9: 387 KB for the bundle in
// 0.4 s once; quality 11 saves 9 % more for ten times the CPU.
//
// The OpenAPI document (/docs/json, and /docs/yaml) is kept the same way:
// it does not change while the process runs, yet the plugin's handler
// serialized all of its 210 KB for every request and sent it uncompressed. It is
// serialized once, compressed once an encoding, and each copy carries a
// strong ETag of its own bytes, so a revalidating client (the explorer
// fetches it on every visit) gets a 304 instead.

const STATIC_DIR = path.join(path.dirname(createRequire(import.meta.url).resolve('@fastify/swagger-ui')), 'static');
/** Where @fastify/swagger-ui serves STATIC_DIR (its routePrefix '/docs'). */
const STATIC_PREFIX = '/docs/static/';
const COMPRESSIBLE = /\.(js|css|html|svg)$/;
/** Smaller files are sent as they are: the headers outweigh what compressing saves. */
const MIN_BYTES = 1024;

export type DocsAssetEncoding = 'br' | 'gzip';
type Encoding = DocsAssetEncoding | 'identity';

const brotli = promisify(zlib.brotliCompress);
const gzip = promisify(zlib.gzip);
/**
 * `input` in `encoding`, Brotli at `brotliQuality`: 9 for the explorer's files; 5 for the
 * OpenAPI document, whose first reader waits for it: 10,960 bytes for its 215,625 in 0.1 to
 * 0.2 s on a loaded machine, where 9 took 1.0 to 1.2 s for 10,590.
 */
function encode(input: Buffer, encoding: Encoding, brotliQuality: number): Promise<Buffer> {
  if (encoding === 'identity') return Promise.resolve(input);
  if (encoding === 'gzip') return gzip(input, { level: 9 });
  return brotli(input, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: brotliQuality, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: input.length } });
}

/** The encoding to answer with, from an Accept-Encoding header: the higher weight of br and gzip (br on a tie), or none. */
export function preferredEncoding(acceptEncoding: string | undefined): DocsAssetEncoding | undefined {
  if (!acceptEncoding) return undefined;
  const weights = new Map<string, number>();
  for (const part of acceptEncoding.toLowerCase().split(',')) {
    const [name, ...parameters] = part.split(';').map((piece) => piece.trim());
    const q = parameters.map((parameter) => /^q=([01](?:\.\d{0,3})?)$/.exec(parameter)).find(Boolean);
    if (name) weights.set(name, q ? Number(q[1]) : 1);
  }
  const weightOf = (encoding: DocsAssetEncoding) => weights.get(encoding) ?? weights.get('*') ?? 0;
  const br = weightOf('br');
  const gz = weightOf('gzip');
  if (br > 0 && br >= gz) return 'br';
  return gz > 0 ? 'gzip' : undefined;
}

/**
 * The documents @fastify/swagger-ui serves at its routePrefix '/docs', by
 * route: their text as its handlers make it (`reply.send(fastify.swagger())`
 * serialized by Fastify's JSON.stringify; `fastify.swagger({ yaml: true })`)
 * and the content type they give it.
 */
const DOCUMENTS: Record<string, { contentType: string; text: (docs: FastifyInstance) => string }> = {
  '/docs/json': { contentType: 'application/json; charset=utf-8', text: (docs) => JSON.stringify(docs.swagger()) },
  '/docs/yaml': { contentType: 'application/x-yaml', text: (docs) => docs.swagger({ yaml: true }) },
};

/** A document's bytes in one encoding, and their strong ETag: a copy's tag names its exact bytes, so no two encodings share one. */
type DocumentCopy = { body: Buffer; etag: string };

/** An answer's Vary with Accept-Encoding added to what the CORS plugin put there, not in its place. */
function varyingByEncoding(vary: unknown): string {
  return vary ? `${String(vary)}, Accept-Encoding` : 'Accept-Encoding';
}

/** Whether If-None-Match names `etag` (weak comparison, RFC 9110 13.1.2), or is `*`. */
function noneMatchNames(ifNoneMatch: string | undefined, etag: string): boolean {
  if (!ifNoneMatch) return false;
  return ifNoneMatch.trim() === '*' || ifNoneMatch.split(',').some((tag) => tag.trim().replace(/^W\//, '') === etag);
}

/** The files worth compressing, by name: what the static route serves from STATIC_DIR. */
async function compressibleAssets(): Promise<Set<string>> {
  const names = new Set<string>();
  for (const entry of await readdir(STATIC_DIR, { withFileTypes: true })) {
    if (entry.isFile() && COMPRESSIBLE.test(entry.name) && (await stat(path.join(STATIC_DIR, entry.name))).size >= MIN_BYTES) names.add(entry.name);
  }
  return names;
}

/**
 * Adds to `docs` (the scope @fastify/swagger-ui is then registered in) the
 * hooks that answer its static files and its OpenAPI documents from memory,
 * compressed when the client takes it. A HEAD gets the headers its GET would.
 */
export async function compressDocs(docs: FastifyInstance): Promise<void> {
  const assets = await compressibleAssets();
  // At most three copies a file (2.5 MB for the bundle's, 3.7 MB in all): a fixed set, never grown by requests.
  const kept = new Map<string, Promise<Buffer>>();
  const encoded = (name: string, encoding: Encoding): Promise<Buffer> => {
    const key = `${encoding}:${name}`;
    let body = kept.get(key);
    if (!body) {
      body = readFile(path.join(STATIC_DIR, name)).then((input) => encode(input, encoding, 9));
      // A failure is not kept: the next request tries again (and this one is streamed as before).
      body.catch(() => kept.delete(key));
      kept.set(key, body);
    }
    return body;
  };

  docs.addHook('onSend', async (request, reply, payload) => {
    if (request.method !== 'GET' && request.method !== 'HEAD') return payload;
    const url = request.url.split('?')[0];
    if (!url.startsWith(STATIC_PREFIX) || !assets.has(url.slice(STATIC_PREFIX.length))) return payload;
    // Each of these answers depends on the header, compressed or not, for any cache between.
    reply.header('vary', varyingByEncoding(reply.getHeader('vary')));
    // A range (206) and a revalidation (304) stay as @fastify/static answers them. Its answer to
    // HEAD is an empty stream with the file's headers: replaced, like GET's, so that both say the
    // same Content-Encoding and Content-Length.
    const streamed = typeof (payload as { pipe?: unknown } | null)?.pipe === 'function';
    if (reply.statusCode !== 200 || !streamed) return payload;
    const encoding = preferredEncoding(request.headers['accept-encoding']) ?? 'identity';
    let body: Buffer;
    try {
      body = await encoded(url.slice(STATIC_PREFIX.length), encoding);
    } catch (error) {
      request.log.warn({ err: error }, 'docs asset could not be read or compressed: streamed from its file');
      return payload;
    }
    (payload as NodeJS.ReadableStream & { destroy(): void }).destroy();
    if (encoding !== 'identity') {
      reply.removeHeader('accept-ranges');
      reply.header('content-encoding', encoding);
    }
    reply.header('content-length', body.length);
    // For HEAD, Fastify keeps the Content-Length set here and sends no body.
    return request.method === 'HEAD' ? null : body;
  });

  // One copy a document and encoding (about 0.25 MB in all for the JSON, 0.3 MB for the YAML), made on the first request that asks for it.
  const documentCopies = new Map<string, Promise<DocumentCopy>>();
  const documentCopy = (route: string, encoding: Encoding): Promise<DocumentCopy> => {
    const key = `${encoding}:${route}`;
    let copy = documentCopies.get(key);
    if (!copy) {
      // Built from the identity copy, so the document is serialized once whatever the encodings.
      const body =
        encoding === 'identity'
          ? Promise.resolve().then(() => Buffer.from(DOCUMENTS[route].text(docs)))
          : documentCopy(route, 'identity').then((identity) => encode(identity.body, encoding, 5));
      copy = body.then((bytes) => ({ body: bytes, etag: `"${createHash('sha256').update(bytes).digest('base64url')}"` }));
      copy.catch(() => documentCopies.delete(key));
      documentCopies.set(key, copy);
    }
    return copy;
  };

  // Answered before the plugin's handler, which would serialize the document again.
  docs.addHook('onRequest', async (request, reply) => {
    const route = request.routeOptions.url;
    if ((request.method !== 'GET' && request.method !== 'HEAD') || route === undefined || !Object.hasOwn(DOCUMENTS, route)) return;
    const encoding = preferredEncoding(request.headers['accept-encoding']) ?? 'identity';
    let copy: DocumentCopy;
    try {
      copy = await documentCopy(route, encoding);
    } catch (error) {
      request.log.warn({ err: error }, 'OpenAPI document could not be serialized or compressed: answered by its route');
      return;
    }
    reply.header('vary', varyingByEncoding(reply.getHeader('vary')));
    reply.header('etag', copy.etag);
    if (noneMatchNames(request.headers['if-none-match'], copy.etag)) return reply.code(304).send();
    reply.header('content-type', DOCUMENTS[route].contentType);
    if (encoding !== 'identity') reply.header('content-encoding', encoding);
    // For HEAD, Fastify's HEAD route measures this body for Content-Length and sends none.
    return reply.send(copy.body);
  });
}
