import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { testSql } from './support/db.ts';
import { feedbackBody } from './support/feedback-fixtures.ts';
import { type SiteverifyStandIn, startSiteverifyStandIn } from './support/siteverify-stand-in.ts';

// What stands before a submission is stored: the captcha check (against a
// loopback siteverify stand-in) and the feedback rate limit.

const SECRET = 'captcha-secret-for-tests';
const PASS = 'token-that-passes';
const sql = testSql();
afterAll(() => sql.end());

const post = (app: FastifyInstance, payload: object, { ip = '198.51.100.20', url = '/api/feedback' } = {}) =>
  app.inject({ method: 'POST', url, payload, remoteAddress: ip });

for (const provider of ['turnstile', 'hcaptcha'] as const) {
  describe(`bot check with ${provider}`, () => {
    let app: FastifyInstance;
    let siteverify: SiteverifyStandIn;

    beforeAll(async () => {
      siteverify = await startSiteverifyStandIn({ secret: SECRET, passToken: PASS });
      app = await buildTestApp({ CAPTCHA_PROVIDER: provider, CAPTCHA_SECRET: SECRET, CAPTCHA_VERIFY_URL: siteverify.url });
    });
    afterAll(async () => {
      await app?.close();
      await siteverify?.stop();
    });

    it('a passing token is verified server-side with secret, response and the client IP', async () => {
      const before = siteverify.requests.length;
      const response = await post(app, feedbackBody({ captchaToken: PASS }), { ip: '203.0.113.7' });
      expect(response.statusCode, response.body).toBe(201);
      const asked = siteverify.requests.slice(before);
      expect(asked).toEqual([
        {
          contentType: expect.stringMatching(/^application\/x-www-form-urlencoded/),
          form: { secret: SECRET, response: PASS, remoteip: '203.0.113.7' },
        },
      ]);
      // The token is not stored with the feedback.
      const [row] = await sql`select to_jsonb(f) as row from public.feedback f where id = ${response.json().data.id}`;
      expect(JSON.stringify(row.row)).not.toContain(PASS);
    });

    it('a refused or missing token → 400 Bot verification failed, nothing stored', async () => {
      const comment = `Bot comment ${crypto.randomUUID()}`;
      for (const body of [feedbackBody({ comment, captchaToken: 'forged' }), feedbackBody({ comment })]) {
        const response = await post(app, body);
        expect(response.statusCode).toBe(400);
        expect(response.json()).toEqual({ success: false, error: 'Bot verification failed', statusCode: 400 });
      }
      expect(await sql`select 1 from public.feedback where comment = ${comment}`).toHaveLength(0);
    });

    it('the body is validated before the provider is asked', async () => {
      const before = siteverify.requests.length;
      const response = await post(app, { captchaToken: PASS });
      expect(response.statusCode).toBe(400);
      expect(response.json().error).toBe('Validation failed');
      expect(siteverify.requests.length).toBe(before);
    });

    it('our secret refused by the provider → 503, not a verdict on the submitter', async () => {
      const misconfigured = await buildTestApp({ CAPTCHA_PROVIDER: provider, CAPTCHA_SECRET: 'a-rotated-secret', CAPTCHA_VERIFY_URL: siteverify.url });
      try {
        const response = await post(misconfigured, feedbackBody({ captchaToken: PASS }));
        expect(response.statusCode, response.body).toBe(503);
        expect(response.json()).toMatchObject({ success: false, error: 'Bot verification unavailable', statusCode: 503 });
      } finally {
        await misconfigured.close();
      }
    });

    it('the provider failing → 503, not a verdict on the submitter', async () => {
      siteverify.mode = 'broken';
      try {
        const response = await post(app, feedbackBody({ captchaToken: PASS }));
        expect(response.statusCode).toBe(503);
        expect(response.json()).toEqual({ success: false, error: 'Bot verification unavailable', statusCode: 503, requestId: expect.any(String) });
      } finally {
        siteverify.mode = 'up';
      }
    });
  });
}

// Turnstile and hCaptcha answer a wrong secret, a malformed request or their
// own failure with HTTP 200 and `success: false`, like a refused token. Those
// are not a verdict on the submitter: read as one, a rotated secret turned
// every submitter away with 400 `Bot verification failed`.
describe('siteverify answers that are not about the token', () => {
  let answer = '';
  let asked = 0;
  const server = createServer((_request, response) => {
    asked += 1;
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(answer);
  });
  let app: FastifyInstance;
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/siteverify`;
    app = await buildTestApp({ CAPTCHA_PROVIDER: 'turnstile', CAPTCHA_SECRET: SECRET, CAPTCHA_VERIFY_URL: url });
  });
  afterAll(async () => {
    await app?.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });

  it.each([
    ['a wrong secret', { success: false, 'error-codes': ['invalid-input-secret'] }],
    ['a secret of another site key (hCaptcha)', { success: false, 'error-codes': ['sitekey-secret-mismatch'] }],
    ["the provider's internal error", { success: false, 'error-codes': ['internal-error'] }],
    ['a malformed request', { success: false, 'error-codes': ['bad-request'] }],
    ['JSON null', null],
  ])('%s → 503 Bot verification unavailable, nothing stored', async (_label, body) => {
    answer = JSON.stringify(body);
    const comment = `Not a bot ${crypto.randomUUID()}`;
    const before = asked;
    const response = await post(app, feedbackBody({ comment, captchaToken: PASS }));
    // The answer came from this verifier, asked once (no retry), not from a check that never asked it.
    expect(asked - before).toBe(1);
    expect(response.statusCode, response.body).toBe(503);
    expect(response.json()).toEqual({ success: false, error: 'Bot verification unavailable', statusCode: 503, requestId: expect.any(String) });
    expect(await sql`select 1 from public.feedback where comment = ${comment}`).toHaveLength(0);
  });

  it.each([['invalid-input-response'], ['timeout-or-duplicate'], ['invalid-or-already-seen-response']])(
    'a refused token (%s) is still 400 Bot verification failed',
    async (code) => {
      answer = JSON.stringify({ success: false, 'error-codes': [code] });
      const before = asked;
      const response = await post(app, feedbackBody({ captchaToken: 'spent' }));
      expect(asked - before).toBe(1);
      expect(response.statusCode).toBe(400);
      expect(response.json()).toEqual({ success: false, error: 'Bot verification failed', statusCode: 400 });
    },
  );
});

describe('without a captcha secret', () => {
  it('the check is off: no token needed', async () => {
    const app = await buildTestApp();
    try {
      expect((await post(app, feedbackBody())).statusCode).toBe(201);
    } finally {
      await app.close();
    }
  });
});

describe('feedback rate limit (SPEC section 8: 5 per 15 minutes per IP)', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp({ RATE_LIMIT_FEEDBACK_PER_15MIN: '5' });
  });
  afterAll(async () => app?.close());

  it('both submit routes share one budget; the 6th → 429 with retryAfter', async () => {
    const ip = '198.51.100.77';
    for (let i = 0; i < 5; i += 1) {
      const url = i % 2 === 0 ? '/api/feedback' : '/api/feedback/submit-feedback';
      expect((await post(app, feedbackBody(), { ip, url })).statusCode, `request ${i + 1}`).toBe(201);
    }
    const refused = await post(app, feedbackBody(), { ip });
    expect(refused.statusCode).toBe(429);
    expect(refused.json()).toEqual({
      success: false,
      error: 'Too many requests. Please try again later.',
      statusCode: 429,
      retryAfter: expect.any(Number),
    });
    expect(refused.json().retryAfter).toBeGreaterThan(14 * 60);
    expect(refused.json().retryAfter).toBeLessThanOrEqual(15 * 60);
    // Another IP has its own budget; the admin list is not in the feedback group.
    expect((await post(app, feedbackBody(), { ip: '198.51.100.78' })).statusCode).toBe(201);
    const token = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'rate-limit-admin');
    const listed = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', remoteAddress: ip, headers: { authorization: `Bearer ${token}` } });
    expect(listed.statusCode).toBe(200);
  });
});
