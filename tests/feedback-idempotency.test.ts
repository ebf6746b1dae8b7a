import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CORS_ORIGIN } from '../src/config.ts';
import { deleteExpiredIdempotencyKeys, IDEMPOTENCY_KEY_IN_PROGRESS, IDEMPOTENCY_KEY_REUSED, scopedIdempotencyKey } from '../src/modules/feedback/idempotency.ts';
import { buildTestApp } from './support/app.ts';
import { testSql } from './support/db.ts';
import { createWebsite, feedbackBody, waitFor } from './support/feedback-fixtures.ts';
import { type ResendStandIn, startResendStandIn } from './support/resend-stand-in.ts';
import { type SiteverifyStandIn, startSiteverifyStandIn } from './support/siteverify-stand-in.ts';

// Idempotency-Key on POST /api/feedback (docs/feedback.md, "Retrying a
// submission"), through HTTP on the real app: the bot check against the
// siteverify stand-in (behind a gate that can hold its answers, to keep a
// first request in progress), notifications through the Resend stand-in, and
// clients told apart by X-Forwarded-For behind one trusted proxy.

const SECRET = 'captcha-secret-for-idempotency';
const PASS = 'token-that-passes-once-per-widget';
const sql = testSql();

let siteverify: SiteverifyStandIn;
let resend: ResendStandIn;
let app: FastifyInstance;
let baseUrl: string;

/** In front of the siteverify stand-in: while `held`, every check waits until `release()`. */
const gate = {
  held: false,
  arrived: 0,
  waiting: [] as Array<() => void>,
  release() {
    this.held = false;
    for (const go of this.waiting.splice(0)) go();
  },
};
let gateServer: Server;

const envBaseUrl = process.env.RESEND_BASE_URL;

beforeAll(async () => {
  siteverify = await startSiteverifyStandIn({ secret: SECRET, passToken: PASS });
  gateServer = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    gate.arrived += 1;
    if (gate.held) await new Promise<void>((resolve) => gate.waiting.push(resolve));
    const answer = await fetch(siteverify.url, {
      method: 'POST',
      headers: { 'content-type': request.headers['content-type'] ?? '' },
      body: Buffer.concat(chunks),
    });
    response.writeHead(answer.status, { 'content-type': 'application/json' });
    response.end(await answer.text());
  });
  await new Promise<void>((resolve) => gateServer.listen(0, '127.0.0.1', resolve));
  resend = await startResendStandIn();
  process.env.RESEND_BASE_URL = 'http://127.0.0.1:9/not-the-stand-in';
  app = await buildTestApp({
    TRUST_PROXY: '1',
    CAPTCHA_PROVIDER: 'turnstile',
    CAPTCHA_SECRET: SECRET,
    CAPTCHA_VERIFY_URL: `http://127.0.0.1:${(gateServer.address() as AddressInfo).port}/siteverify`,
    RESEND_API_KEY: 're_test_key',
    RESEND_BASE_URL: resend.url,
    EMAIL_FROM: 'Portfolio Feedback <feedback@example.test>',
    FEEDBACK_NOTIFY_EMAILS: 'triage@example.test',
    FEEDBACK_OUTBOX_WORKER: 'true',
    FEEDBACK_OUTBOX_POLL_MS: '25',
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  baseUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  gate.release();
  await app?.close();
  await resend?.stop();
  await siteverify?.stop();
  await new Promise<void>((resolve) => (gateServer ? gateServer.close(() => resolve()) : resolve()));
  process.env.RESEND_BASE_URL = envBaseUrl;
  await sql.end();
});

/** A client address of each test's own (TEST-NET-3): its keys and rate-limit budget are its own. */
let nextClient = 0;
const newClient = () => `203.0.113.${(nextClient++ % 250) + 1}`;

interface Sent {
  status: number;
  body: Record<string, unknown>;
  replayed: string | null;
}

async function submit(payload: object, { key, ip, url = '/api/feedback' }: { key?: string; ip: string; url?: string }): Promise<Sent> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-forwarded-for': ip };
  if (key !== undefined) headers['idempotency-key'] = key;
  const response = await fetch(`${baseUrl}${url}`, { method: 'POST', headers, body: JSON.stringify(payload) });
  return { status: response.status, body: (await response.json()) as Record<string, unknown>, replayed: response.headers.get('idempotent-replayed') };
}

const rowsFrom = async (email: string) => (await sql<{ id: string }[]>`select id from public.feedback where email = ${email}`).map((row) => row.id);
const checksFrom = (ip: string) => siteverify.requests.filter((request) => request.form.remoteip === ip).length;
const idOf = (sent: Sent) => (sent.body.data as { id: string }).id;

describe('POST /api/feedback with an Idempotency-Key', () => {
  it('a retry after a lost answer gets the same answer, marked as a replay: one row, one e-mail, one bot check', async () => {
    const ip = newClient();
    const key = randomUUID();
    const body = feedbackBody({ captchaToken: PASS });
    const first = await submit(body, { key, ip });
    expect(first.status, JSON.stringify(first.body)).toBe(201);
    expect(first.replayed).toBeNull();
    // The answer was lost: the library sends the request again, token and all.
    const retry = await submit(body, { key, ip });
    expect(retry.status, JSON.stringify(retry.body)).toBe(201);
    expect(retry.body).toEqual(first.body);
    expect(retry.replayed).toBe('true');
    // The front end's page (another origin) can read that header.
    const fromPage = await fetch(`${baseUrl}/api/feedback`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-forwarded-for': ip, 'idempotency-key': key, origin: DEFAULT_CORS_ORIGIN },
      body: JSON.stringify(body),
    });
    expect(fromPage.headers.get('access-control-expose-headers')?.split(/,\s*/)).toContain('Idempotent-Replayed');
    // The legacy path is the same operation: the same key there is the same submission.
    const legacy = await submit(body, { key, ip, url: '/api/feedback/submit-feedback' });
    expect([legacy.status, legacy.body, legacy.replayed]).toEqual([201, first.body, 'true']);
    // A widget that handed out a fresh token for the retry: the same submission all the same.
    const freshToken = await submit({ ...body, captchaToken: 'a-fresh-token' }, { key, ip });
    expect([freshToken.status, freshToken.body, freshToken.replayed]).toEqual([201, first.body, 'true']);

    expect(await rowsFrom(body.email)).toEqual([idOf(first)]);
    expect(checksFrom(ip)).toBe(1);
    await waitFor(() => resend.sentAbout(idOf(first)).length === 1, 10_000, 'the notification');
    // Given the worker time for more: still the one e-mail.
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(resend.sentAbout(idOf(first))).toHaveLength(1);
  });

  it('keeps the answer only, never the submitted text, and with the row it answers', async () => {
    const ip = newClient();
    const body = feedbackBody({ captchaToken: PASS, comment: 'A comment the key table must not hold' });
    const first = await submit(body, { key: randomUUID(), ip });
    expect(first.status).toBe(201);
    const rows = await sql`
      select answer_status, answer_data, feedback_id, to_jsonb(k)::text as whole
        from public.feedback_idempotency_keys k where feedback_id = ${idOf(first)}`;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ answer_status: 201, answer_data: { id: idOf(first), status: 'pending' }, feedback_id: idOf(first) });
    expect(rows[0].whole).not.toContain('must not hold');
    expect(rows[0].whole).not.toContain(body.email);
  });

  it('the same key with a different body is refused with 422, storing nothing and asking no bot check', async () => {
    const ip = newClient();
    const key = randomUUID();
    const first = await submit(feedbackBody({ captchaToken: PASS }), { key, ip });
    expect(first.status).toBe(201);
    const other = feedbackBody({ captchaToken: PASS });
    const reused = await submit(other, { key, ip });
    expect(reused.status).toBe(422);
    expect(reused.body).toEqual({ success: false, error: IDEMPOTENCY_KEY_REUSED, statusCode: 422 });
    expect(await rowsFrom(other.email)).toEqual([]);
    expect(checksFrom(ip)).toBe(1);
  });

  it('a second request while the first is in progress gets 409; never two rows', async () => {
    const ip = newClient();
    const key = randomUUID();
    const body = feedbackBody({ captchaToken: PASS });
    gate.held = true;
    const arrived = gate.arrived;
    try {
      const first = submit(body, { key, ip });
      // The first holds the key, waiting on its bot check.
      await waitFor(() => gate.arrived > arrived, 10_000, 'the first bot check');
      const second = await submit(body, { key, ip });
      expect(second.status).toBe(409);
      expect(second.body).toEqual({ success: false, error: IDEMPOTENCY_KEY_IN_PROGRESS, statusCode: 409 });
      gate.release();
      const done = await first;
      expect(done.status, JSON.stringify(done.body)).toBe(201);
      // Now answered, the same retry is a replay.
      const third = await submit(body, { key, ip });
      expect([third.status, third.body, third.replayed]).toEqual([201, done.body, 'true']);
      expect(await rowsFrom(body.email)).toEqual([idOf(done)]);
      expect(checksFrom(ip)).toBe(1);
    } finally {
      gate.release();
    }
  });

  it('a claim left unanswered too long is taken over, and the stalled first attempt then stores nothing', async () => {
    const ip = newClient();
    const key = randomUUID();
    const body = feedbackBody({ captchaToken: PASS });
    gate.held = true;
    try {
      const arrived = gate.arrived;
      const first = submit(body, { key, ip });
      await waitFor(() => gate.arrived > arrived, 10_000, 'the first bot check');
      // As if the first had stalled past the in-progress limit (or its server died).
      const aged = await sql`
        update public.feedback_idempotency_keys set claimed_at = now() - interval '2 minutes'
         where scoped_key = ${scopedIdempotencyKey(ip, key)} and answer_status is null
         returning 1`;
      expect(aged).toHaveLength(1);
      const second = submit(body, { key, ip });
      await waitFor(() => gate.arrived > arrived + 1, 10_000, 'the second bot check');
      gate.release();
      const answers = await Promise.all([first, second]);
      expect(answers.map((answer) => answer.status).sort()).toEqual([201, 409]);
      const stored = answers.find((answer) => answer.status === 201)!;
      expect(await rowsFrom(body.email)).toEqual([idOf(stored)]);
    } finally {
      gate.release();
    }
  });

  it('is scoped to its client: another address with the same key and body is a submission of its own', async () => {
    const key = randomUUID();
    const body = feedbackBody({ captchaToken: PASS });
    const [ipA, ipB] = [newClient(), newClient()];
    const fromA = await submit(body, { key, ip: ipA });
    const fromB = await submit(body, { key, ip: ipB });
    expect([fromA.status, fromB.status]).toEqual([201, 201]);
    expect(fromB.replayed).toBeNull();
    expect(idOf(fromB)).not.toBe(idOf(fromA));
    expect((await rowsFrom(body.email)).sort()).toEqual([idOf(fromA), idOf(fromB)].sort());
  });

  it('refuses a key that is empty, longer than 255 characters or not visible ASCII, naming the header', async () => {
    const ip = newClient();
    for (const key of ['', 'k'.repeat(256), 'two words', 'tab\tinside']) {
      const body = feedbackBody({ captchaToken: PASS });
      const refused = await submit(body, { key, ip });
      expect(refused.status, JSON.stringify(key)).toBe(400);
      expect(refused.body).toMatchObject({ success: false, error: 'Validation failed', details: { 'idempotency-key': [expect.any(String)] } });
      expect(await rowsFrom(body.email)).toEqual([]);
    }
    const longest = await submit(feedbackBody({ captchaToken: PASS }), { key: `~${'k'.repeat(253)}!`, ip });
    expect(longest.status, JSON.stringify(longest.body)).toBe(201);
  });

  it('without a key nothing changes: each request is stored', async () => {
    const ip = newClient();
    const body = feedbackBody({ captchaToken: PASS });
    const first = await submit(body, { ip });
    const again = await submit(body, { ip });
    expect([first.status, again.status]).toEqual([201, 201]);
    expect([first.replayed, again.replayed]).toEqual([null, null]);
    expect((await rowsFrom(body.email)).sort()).toEqual([idOf(first), idOf(again)].sort());
  });

  it('a failed first attempt is not recorded: the retry with the body fixed, under the same key, is stored', async () => {
    const ip = newClient();
    // Refused by the body's schema, before the key is looked at.
    const key = randomUUID();
    const fixed = feedbackBody({ captchaToken: PASS });
    const invalid = await submit({ ...fixed, rating: 9 }, { key, ip });
    expect(invalid.status).toBe(400);
    const stored = await submit(fixed, { key, ip });
    expect([stored.status, stored.replayed]).toEqual([201, null]);

    // Refused by the bot check, after the key was claimed: the claim is given back.
    const botKey = randomUUID();
    const human = feedbackBody({ captchaToken: PASS });
    const bot = await submit({ ...human, captchaToken: 'a-wrong-token' }, { key: botKey, ip });
    expect([bot.status, bot.body.error]).toEqual([400, 'Bot verification failed']);
    const solved = await submit(human, { key: botKey, ip });
    expect([solved.status, solved.replayed], JSON.stringify(solved.body)).toEqual([201, null]);
    expect(await rowsFrom(human.email)).toEqual([idOf(solved)]);

    // Refused by the insert (an unknown website): given back too.
    const siteKey = randomUUID();
    const websiteId = await createWebsite(sql, 'Idempotency target');
    const linked = feedbackBody({ captchaToken: PASS, websiteId: randomUUID() });
    const unknown = await submit(linked, { key: siteKey, ip });
    expect([unknown.status, unknown.body.details]).toEqual([400, { websiteId: ['Website not found'] }]);
    const known = await submit({ ...linked, websiteId }, { key: siteKey, ip });
    expect([known.status, known.replayed], JSON.stringify(known.body)).toEqual([201, null]);
    expect(await rowsFrom(linked.email)).toEqual([idOf(known)]);
  });

  it('forgets a key after 24 hours: no replay, and the periodic delete removes it', async () => {
    const ip = newClient();
    const key = randomUUID();
    const body = feedbackBody({ captchaToken: PASS });
    const first = await submit(body, { key, ip });
    expect(first.status).toBe(201);
    await sql`update public.feedback_idempotency_keys set claimed_at = now() - interval '25 hours' where feedback_id = ${idOf(first)}`;
    const later = await submit(body, { key, ip });
    expect([later.status, later.replayed]).toEqual([201, null]);
    expect(idOf(later)).not.toBe(idOf(first));

    const [{ count: before }] = await sql<{ count: number }[]>`select count(*)::int as count from public.feedback_idempotency_keys where feedback_id = ${idOf(later)}`;
    expect(before).toBe(1);
    await sql`update public.feedback_idempotency_keys set claimed_at = now() - interval '25 hours' where feedback_id = ${idOf(later)}`;
    expect(await deleteExpiredIdempotencyKeys(app.db)).toBeGreaterThanOrEqual(1);
    const left = await sql`select 1 from public.feedback_idempotency_keys where feedback_id = ${idOf(later)}`;
    expect(left).toHaveLength(0);
  });
});
