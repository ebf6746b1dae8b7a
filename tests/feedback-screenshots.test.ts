import http from 'node:http';
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { REFUSED_BODY_DRAIN_BYTES } from '../src/plugins/errors.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { testSql } from './support/db.ts';
import { startServerProcess } from './support/fault-traffic.ts';
import { feedbackBody, pngDataUrl } from './support/feedback-fixtures.ts';

// Screenshots on submission: base64 image data URLs of at most 5 MiB decoded,
// which needs a larger body limit on the submit routes than the global 1 MiB.

const sql = testSql();
let app: FastifyInstance;
let adminToken: string;

beforeAll(async () => {
  app = await buildTestApp();
  adminToken = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops-admin-screenshot-tests');
});
afterAll(async () => {
  await app?.close();
  await sql.end();
});

const submit = (body: unknown) => app.inject({ method: 'POST', url: '/api/feedback', payload: body as object });
const update = (id: string, body: unknown) =>
  app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: { authorization: `Bearer ${adminToken}` }, payload: body as object });

async function submitted(): Promise<string> {
  const response = await submit(feedbackBody());
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

describe('screenshots', () => {
  const MB = 1024 * 1024;

  it('a 4.9 MB screenshot is accepted (its route allows the larger body) and stored whole', async () => {
    const screenshot = pngDataUrl(Math.floor(4.9 * MB));
    const started = performance.now();
    const response = await submit(feedbackBody({ screenshot }));
    const elapsed = performance.now() - started;
    expect(response.statusCode, response.body).toBe(201);
    const [row] = await sql`select octet_length(screenshot) as length, screenshot = ${screenshot} as same from public.feedback where id = ${response.json().data.id}`;
    expect(row).toEqual({ length: screenshot.length, same: true });
    console.log(`4.9 MB screenshot: body ${(screenshot.length / MB).toFixed(2)} MiB, accepted in ${elapsed.toFixed(0)} ms`);
  });

  it('a screenshot over 5 MiB → 400 with details.screenshot', async () => {
    for (const bytes of [5 * MB + 1, 5 * MB + 3]) {
      const response = await submit(feedbackBody({ screenshot: pngDataUrl(bytes) }));
      expect(response.statusCode, `${bytes} bytes`).toBe(400);
      expect(response.json().details).toEqual({ screenshot: ['Screenshot must be at most 5 MiB (5,242,880 bytes)'] });
    }
    // Exactly 5 MiB still fits.
    expect((await submit(feedbackBody({ screenshot: pngDataUrl(5 * MB) }))).statusCode).toBe(201);
  });

  it.each([
    ['an SVG', 'data:image/svg+xml;base64,PHN2Zz48L3N2Zz4=', 'Screenshot must be a PNG, JPEG, GIF, WebP or AVIF image'],
    ['a non-image type', 'data:text/html;base64,PGgxPmhpPC9oMT4=', 'Screenshot must be a PNG, JPEG, GIF, WebP or AVIF image'],
    ['a plain URL', 'https://example.test/shot.png', 'Screenshot must be a base64-encoded image data URL'],
    ['broken base64', 'data:image/png;base64,abc', 'Screenshot must be a base64-encoded image data URL'],
    ['markup in the payload', 'data:image/png;base64,<script>', 'Screenshot must be a base64-encoded image data URL'],
    ['text under an image type', 'data:image/png;base64,aGVsbG8gd29ybGQ=', 'Screenshot data is not an image of its declared type'],
    ['a JPEG said to be a PNG', `data:image/png;base64,${Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 16]).toString('base64')}`, 'Screenshot data is not an image of its declared type'],
  ])('%s → 400', async (_label, screenshot, message) => {
    const response = await submit(feedbackBody({ screenshot }));
    expect(response.statusCode).toBe(400);
    expect(response.json().details).toEqual({ screenshot: [message] });
  });

  it('a body over the route limit → 413 in the envelope; other routes keep the 1 MB global limit', async () => {
    const huge = await submit(feedbackBody({ screenshot: pngDataUrl(6 * MB) }));
    expect(huge.statusCode).toBe(413);
    expect(huge.json()).toEqual({ success: false, error: 'Request body too large', statusCode: 413 });

    const id = await submitted();
    const bigUpdate = await update(id, { adminNotes: 'x'.repeat(1.5 * MB) });
    expect(bigUpdate.statusCode).toBe(413);
    expect(bigUpdate.json().error).toBe('Request body too large');
  });
});

describe('a body refused while its client is still sending it', () => {
  // Over a socket to a server process: in one process the client's writes and
  // the server's close take turns on one thread, and the race never shows.
  const MB = 1024 * 1024;
  const oversized = JSON.stringify(feedbackBody({ screenshot: pngDataUrl(6 * MB) }));

  /** One request on `agent`: its status, body, `Connection` header, and whether it went on a socket used before. */
  function send(agent: http.Agent, base: string, method: string, path: string, body?: string) {
    return new Promise<{ status: number; body: string; reused: boolean; connection?: string }>((resolve, reject) => {
      const request = http.request(`${base}${path}`, { method, agent, headers: { 'content-type': 'application/json' } }, (response) => {
        let text = '';
        response.setEncoding('utf8').on('data', (chunk) => (text += chunk));
        // The agent takes the socket back once the request is sent whole, which may be after the answer.
        const sent = request.writableFinished ? Promise.resolve() : new Promise((done) => request.once('finish', done));
        response.on('end', () =>
          void sent.then(() => resolve({ status: response.statusCode!, body: text, reused: request.reusedSocket, connection: response.headers.connection })),
        );
      });
      request.on('error', reject);
      request.end(body);
    });
  }

  it('gets its 413 (fetch and a keep-alive agent); the connection then serves the next request; one announced far larger is cut off', { timeout: 60_000 }, async () => {
    const server = await startServerProcess(inject('stack').databaseUrl);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const envelope = { success: false, error: 'Request body too large', statusCode: 413 };
      for (let round = 0; round < 3; round++) {
        const response = await fetch(`${server.baseUrl}/api/feedback`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: oversized });
        expect([response.status, await response.json()]).toEqual([413, envelope]);
      }
      // Refused for its type before any of it is read: Fastify leaves that body to Node, which
      // reads and drops it, so this answer was readable before too.
      const wrongType = await fetch(`${server.baseUrl}/api/feedback`, { method: 'POST', headers: { 'content-type': 'application/xml' }, body: oversized });
      expect([wrongType.status, ((await wrongType.json()) as { error: string }).error]).toEqual([415, 'Unsupported content type; send JSON with Content-Type: application/json']);
      const refused = await send(agent, server.baseUrl, 'POST', '/api/feedback', oversized);
      expect([refused.status, JSON.parse(refused.body)]).toEqual([413, envelope]);
      expect(refused.connection).not.toBe('close');
      const next = await send(agent, server.baseUrl, 'GET', '/health');
      expect([next.status, next.reused]).toEqual([200, true]);

      // Announced larger than what is read and dropped: answered at once and the socket closed,
      // although the client has sent only a megabyte of it.
      const closed = await new Promise<{ status: number; connection?: string; closed: boolean }>((resolve, reject) => {
        const request = http.request(`${server.baseUrl}/api/feedback`, {
          method: 'POST',
          agent: false,
          headers: { 'content-type': 'application/json', 'content-length': REFUSED_BODY_DRAIN_BYTES + 1 },
        });
        request.on('response', (response) => {
          response.resume();
          const timer = setTimeout(() => resolve({ status: response.statusCode!, connection: response.headers.connection, closed: false }), 5_000);
          request.socket!.once('close', () => {
            clearTimeout(timer);
            resolve({ status: response.statusCode!, connection: response.headers.connection, closed: true });
          });
        });
        request.on('error', reject);
        request.write(Buffer.alloc(MB, 'x'));
      });
      expect(closed).toEqual({ status: 413, connection: 'close', closed: true });

      // Sent in chunks with no length announced (over a plain socket: Node's own client stops
      // writing a request once its answer has come): read and dropped up to the bound, then cut off.
      const limit = REFUSED_BODY_DRAIN_BYTES + 32 * MB;
      const written = await new Promise<number>((resolve) => {
        const { port } = new URL(server.baseUrl);
        const socket = net.connect(Number(port), '127.0.0.1');
        socket.write('POST /api/feedback HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
        let total = 0;
        const chunk = Buffer.alloc(MB, 'x');
        const writeMore = () => {
          while (total < limit && !socket.destroyed) {
            total += chunk.length;
            socket.write(`${chunk.length.toString(16)}\r\n`);
            socket.write(chunk);
            if (!socket.write('\r\n')) return void socket.once('drain', writeMore);
          }
          resolve(total);
        };
        socket.on('error', () => resolve(total));
        socket.on('close', () => resolve(total));
        socket.on('data', () => {});
        writeMore();
      });
      expect(written).toBeGreaterThan(REFUSED_BODY_DRAIN_BYTES);
      expect(written).toBeLessThan(limit);
      expect(await (await fetch(`${server.baseUrl}/health`)).json()).toMatchObject({ status: 'ok' });
    } finally {
      agent.destroy();
      await server.stop();
    }
  });
});
