import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { testSql } from './support/db.ts';
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

  it('a screenshot over 5 MB → 400 with details.screenshot', async () => {
    for (const bytes of [5 * MB + 1, 5 * MB + 3]) {
      const response = await submit(feedbackBody({ screenshot: pngDataUrl(bytes) }));
      expect(response.statusCode, `${bytes} bytes`).toBe(400);
      expect(response.json().details).toEqual({ screenshot: ['Screenshot must be at most 5 MB'] });
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
