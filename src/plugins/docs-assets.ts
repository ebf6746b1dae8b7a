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
const ENCODE: Record<Encoding, (input: Buffer) => Promise<Buffer>> = {
  identity: async (input) => input,
  br: (input) =>
    brotli(input, { params: { [zlib.constants.BROTLI_PARAM_QUALITY]: 9, [zlib.constants.BROTLI_PARAM_SIZE_HINT]: input.length } }),
  gzip: (input) => gzip(input, { level: 9 }),
};

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

/** The files worth compressing, by name: what the static route serves from STATIC_DIR. */
async function compressibleAssets(): Promise<Set<string>> {
  const names = new Set<string>();
  for (const entry of await readdir(STATIC_DIR, { withFileTypes: true })) {
    if (entry.isFile() && COMPRESSIBLE.test(entry.name) && (await stat(path.join(STATIC_DIR, entry.name))).size >= MIN_BYTES) names.add(entry.name);
  }
  return names;
}

/** Adds to `docs` (the scope @fastify/swagger-ui is then registered in) the hook that answers its static files from memory, compressed when the client takes it. */
export async function compressDocsAssets(docs: FastifyInstance): Promise<void> {
  const assets = await compressibleAssets();
  // At most three copies a file (2.5 MB for the bundle's, 3.7 MB in all): a fixed set, never grown by requests.
  const kept = new Map<string, Promise<Buffer>>();
  const encoded = (name: string, encoding: Encoding): Promise<Buffer> => {
    const key = `${encoding}:${name}`;
    let body = kept.get(key);
    if (!body) {
      body = readFile(path.join(STATIC_DIR, name)).then(ENCODE[encoding]);
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
    const vary = reply.getHeader('vary');
    reply.header('vary', vary ? `${String(vary)}, Accept-Encoding` : 'Accept-Encoding');
    // A range (206), a revalidation (304) and HEAD stay as @fastify/static answers them.
    const streamed = typeof (payload as { pipe?: unknown } | null)?.pipe === 'function';
    if (request.method !== 'GET' || reply.statusCode !== 200 || !streamed) return payload;
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
    return body;
  });
}
