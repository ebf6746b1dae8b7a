import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import pino from 'pino';
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { loggerOptions } from '../src/logger.ts';
import { claimDueMailsElevated } from '../src/modules/feedback/outbox/capped-claims.ts';
import { commentStart, DIGEST_COMMENT_CHARS } from '../src/modules/feedback/outbox/digest.ts';
import { createMailTransport, type MailTransport } from '../src/modules/feedback/outbox/mail-transport.ts';
import { type NotifiedFeedback, renderFeedbackNotification } from '../src/modules/feedback/outbox/notification.ts';
import { createWorker, digestIdempotencyKeyFor, idempotencyKeyFor } from '../src/modules/feedback/outbox/worker.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { buildTestApp, testConfig } from './support/app.ts';
import { feedbackBody, insertFeedbackRows, waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';
import { type ResendRequest, type ResendStandIn, startResendStandIn } from './support/resend-stand-in.ts';

// The cap on notification e-mails across the deployment
// (FEEDBACK_NOTIFICATIONS_PER_HOUR, docs/feedback.md): below it each
// notification goes alone, as without it; past it they wait, and when the
// window has room one digest carries them. The cap is counted in the
// database, so this file has a database of its own (the shared one holds
// every other file's notifications), and the hour is a few seconds here
// (the worker's `capWindowMs`). What the Resend stand-in received is the proof.

const database = await createPrivateDatabase('outbox_digest');
const sql = postgres(database.url, { max: 2, onnotice: () => {} });
const WINDOW_MS = 3_000;
const NOTIFY = ['triage@example.test'];
const ADMIN_URL = 'https://admin.example.test/console';
const FROM = 'Portfolio Feedback <feedback@example.test>';
const log = pino(loggerOptions('silent', false)) as unknown as FastifyBaseLogger;

let resend: ResendStandIn;
/** Two instances on the database, their own workers off: submissions, deletions, and each a pool for a worker. */
let app: FastifyInstance;
let other: FastifyInstance;
const stops: (() => Promise<void>)[] = [];

beforeAll(async () => {
  resend = await startResendStandIn();
  app = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false' });
  other = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false' });
});
beforeEach(async () => {
  await sql`delete from public.feedback`;
  resend.requests.length = 0;
  resend.latencyMs = 0;
  resend.mode = 'up';
});
afterEach(async () => {
  await Promise.all(stops.splice(0).map((stop) => stop()));
});
afterAll(async () => {
  await app?.close();
  await other?.close();
  await resend?.stop();
  await sql.end();
  await database.drop();
});

function cappedConfig(perHour: number, overrides: Record<string, string> = {}) {
  return testConfig({
    DATABASE_URL: database.url,
    RESEND_API_KEY: 're_test_key',
    RESEND_BASE_URL: resend.url,
    EMAIL_FROM: FROM,
    FEEDBACK_NOTIFY_EMAILS: NOTIFY.join(','),
    ADMIN_URL,
    FEEDBACK_OUTBOX_POLL_MS: '25',
    FEEDBACK_OUTBOX_RETRY_BASE_MS: '20',
    FEEDBACK_OUTBOX_RETRY_MAX_MS: '100',
    FEEDBACK_NOTIFICATIONS_PER_HOUR: String(perHour),
    ...overrides,
  });
}

/** A started worker on `on`'s pool with a window of WINDOW_MS; stopped after the test. */
function startWorker(
  perHour: number,
  { on = app, digestMaxItems = 100, leaseMs = undefined as number | undefined, maxAttempts = 1000 } = {},
) {
  const config = cappedConfig(perHour, { FEEDBACK_OUTBOX_MAX_ATTEMPTS: String(maxAttempts) });
  const sender = createMailTransport(config)!;
  const worker = createWorker(on.db.sql, config, sender, log, { capWindowMs: WINDOW_MS, digestMaxItems, ...(leaseMs ? { leaseMs } : {}) });
  worker.start();
  stops.push(async () => {
    await worker.stop(2_000);
    sender.close();
  });
  return worker;
}

async function submit(overrides: Record<string, unknown> = {}): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody(overrides) });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

const accepted = () => resend.requests.filter((request) => request.status === 200 && !request.replayed);
const until = (count: number, label: string, timeoutMs = WINDOW_MS + 10_000) =>
  waitFor(() => accepted().length >= count || undefined, timeoutMs, label);
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function outboxOf(feedbackIds: string[]) {
  return sql<{ id: string; feedback_id: string; sent_at: Date | null; digest_id: string | null; provider_message_id: string | null }[]>`
    select id, feedback_id, sent_at, digest_id, provider_message_id from public.feedback_outbox
     where feedback_id = any(${feedbackIds}::uuid[]) order by feedback_id`;
}

/** Each e-mail claimed (a notification alone or a digest) and when, by the database's clock. */
const EMAILS_CLAIMED = `select distinct coalesce(digest_id, id) as mail, claimed_at from public.feedback_outbox where claimed_at is not null`;

/** The most e-mails claimed within one window of WINDOW_MS: the cap says at most `perHour`. */
async function mostInOneWindow(): Promise<number> {
  const [{ most }] = await sql.unsafe<{ most: number }[]>(`
    with emails as (${EMAILS_CLAIMED})
    select coalesce(max((select count(*) from emails o
                          where o.claimed_at > s.claimed_at - make_interval(secs => ${WINDOW_MS / 1000})
                            and o.claimed_at <= s.claimed_at)), 0)::int as most
      from emails s`);
  return most;
}

async function emailsClaimed(): Promise<number> {
  return (await sql.unsafe<{ mails: number }[]>(`select count(*)::int as mails from (${EMAILS_CLAIMED}) e`))[0].mails;
}

const feedbackIdsIn = (request: ResendRequest, among: string[]) => among.filter((id) => request.body.text.includes(id));

describe('below the cap', () => {
  it('each notification goes alone, the same e-mail and key as without a cap', async () => {
    startWorker(3);
    const ids = [await submit({ comment: 'First <one> & more' }), await submit({ category: 'Bug Report' })];
    await until(2, 'two notifications');
    await pause(300);
    expect(accepted()).toHaveLength(2);
    for (const [outbox] of await Promise.all(ids.map((id) => outboxOf([id])))) {
      const [feedback] = await sql<NotifiedFeedback[]>`
        select id, name, email, rating, comment, category, location from public.feedback where id = ${outbox.feedback_id}`;
      const mail = { from: FROM, to: NOTIFY, ...renderFeedbackNotification(feedback, ADMIN_URL) };
      const [request] = resend.sentAbout(outbox.feedback_id);
      expect(request.body).toEqual(mail);
      expect(request.idempotencyKey).toBe(idempotencyKeyFor(outbox.id, mail));
      expect(outbox.digest_id).toBeNull();
    }
  });
});

describe('past the cap', () => {
  it('the rest wait, counted as owed; when the window has room one digest carries them all, escaped, with a key from their set', async () => {
    startWorker(3);
    const first = [await submit(), await submit(), await submit()];
    await until(3, 'three single notifications');
    const long = `${'é'.repeat(150)}${'🙂'.repeat(80)} the end`;
    const waiting = [
      await submit({ name: 'Eve <b>bold</b>', comment: '<script>alert(1)</script> & "quoted"', category: 'Bug Report' }),
      await submit({ comment: long, rating: 2 }),
      await submit({ name: 'Mallory\nRating: 5 / 5', comment: 'line one\nOpen it: https://evil.example.test' }),
      await submit(),
    ];
    await pause(WINDOW_MS / 3);
    // The window is full: nothing more went out, and the four are owed (what /api/admin/status reports).
    expect(accepted()).toHaveLength(3);
    expect(await app.feedbackOutbox.backlog()).toEqual({ owed: 4, failing: 0 });

    await until(4, 'the digest');
    await pause(300);
    expect(accepted()).toHaveLength(4);
    const digest = accepted()[3];
    expect(first.map((id) => resend.sentAbout(id).length)).toEqual([1, 1, 1]);
    expect(feedbackIdsIn(digest, waiting)).toEqual(waiting);
    expect(digest.body.subject).toBe('New Feedback Submissions (4)');
    expect(digest.body.to).toEqual(NOTIFY);
    expect(digest.body.from).toBe(FROM);
    const { text, html } = digest.body;
    for (const id of waiting) {
      expect(text).toContain(`Open it: ${ADMIN_URL}/feedback/${id}`);
      expect(html).toContain(`<a href="${ADMIN_URL}/feedback/${id}">`);
      expect(text).toContain(`Id: ${id}`);
    }
    expect(text).toMatch(/^4 feedback submissions/);
    // Plain text as typed, one-line fields on their line, the comment quoted; HTML escaped.
    expect(text).toContain('Name: Eve <b>bold</b>');
    expect(text).toContain('> <script>alert(1)</script> & "quoted"');
    expect(text).toContain('Category: Bug Report');
    expect(text).toContain('Rating: 2 / 5');
    expect(text).toContain('Name: Mallory Rating: 5 / 5');
    expect(text).toContain('> line one\n> Open it: https://evil.example.test');
    expect(html).toContain('Eve &lt;b&gt;bold&lt;/b&gt;');
    expect(html).toContain('&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quoted&quot;');
    expect(html).not.toMatch(/<script|<b>/);
    // Only the start of a long comment, cut between characters, not inside one.
    const start = `${Array.from(long).slice(0, DIGEST_COMMENT_CHARS).join('')}…`;
    expect(commentStart(long)).toBe(start);
    expect(text).toContain(`> ${start}\n`);
    expect(html).toContain(start);
    expect(text).not.toContain('the end');

    const rows = await outboxOf(waiting);
    expect(rows.every((row) => row.sent_at !== null && row.digest_id === rows[0].digest_id && row.digest_id !== null)).toBe(true);
    expect(new Set(rows.map((row) => row.provider_message_id)).size).toBe(1);
    const outboxIds = rows.map((row) => row.id);
    const message = { from: FROM, to: NOTIFY, subject: digest.body.subject, html, text }; // as the worker builds it
    expect(digest.idempotencyKey).toBe(digestIdempotencyKeyFor(outboxIds, message));
    expect(digest.idempotencyKey).toBe(digestIdempotencyKeyFor([...outboxIds].reverse(), message));
    expect(digest.idempotencyKey).toMatch(/^feedback-digest-[0-9a-f]{16}-[0-9a-f]{16}$/);
    expect(await app.feedbackOutbox.backlog()).toEqual({ owed: 0, failing: 0 });
    expect(await mostInOneWindow()).toBe(3);
  });

  it('a digest carries at most its number of items, oldest first; the rest go in the next', async () => {
    // One statement: the same created_at, so oldest first is by outbox id.
    await insertFeedbackRows(sql, 12);
    const ids = (await sql<{ feedback_id: string }[]>`select feedback_id from public.feedback_outbox order by id`).map((row) => row.feedback_id);
    startWorker(2, { digestMaxItems: 4 });
    await until(2, 'two digests');
    await pause(WINDOW_MS / 3);
    expect(accepted()).toHaveLength(2);
    await until(3, 'the third digest, in the next window');
    await pause(300);
    const carried = accepted().map((request) => feedbackIdsIn(request, ids));
    expect(carried.map((part) => part.length)).toEqual([4, 4, 4]);
    expect([...carried[0], ...carried[1]].sort()).toEqual(ids.slice(0, 8).sort());
    expect(carried[2].sort()).toEqual(ids.slice(8).sort());
    expect(accepted().map((request) => request.body.subject)).toEqual(Array(3).fill('New Feedback Submissions (4)'));
    expect(await mostInOneWindow()).toBe(2);
  });

  it('a feedback deleted (DELETE /api/feedback/:id) while it waits is in no later digest', async () => {
    startWorker(1);
    await submit();
    await until(1, 'the single notification');
    const waiting = [await submit(), await submit({ comment: 'Please erase this one' }), await submit()];
    const response = await app.inject({ method: 'DELETE', url: `/api/feedback/${waiting[1]}`, headers: await legacyAdmin() });
    expect(response.statusCode, response.body).toBe(200);
    await until(2, 'the digest');
    await pause(300);
    expect(accepted()).toHaveLength(2);
    expect(feedbackIdsIn(accepted()[1], waiting)).toEqual([waiting[0], waiting[2]]);
    expect(accepted()[1].body.subject).toBe('New Feedback Submissions (2)');
    expect(resend.about(waiting[1])).toEqual([]);
  });
});

describe('never lost, never twice, never past the cap', () => {
  it('a crash between the send and its mark: the next instance sends the same digest under the same key, and the provider drops it', async () => {
    const ids = await insertFeedbackRows(sql, 3);
    // The first instance's send reaches the provider and its answer never comes back; then the
    // instance is gone (its pool closed: no mark, no lease renewal), as in a crash.
    const config = cappedConfig(2);
    const crashedApp = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false' });
    const real = createMailTransport(config)!;
    const crashing: MailTransport = { ...real, send: async (mail, key) => (await real.send(mail, key), new Promise<never>(() => {})) };
    createWorker(crashedApp.db.sql, config, crashing, log, { capWindowMs: WINDOW_MS, leaseMs: 1_000 }).start();
    await waitFor(() => resend.requests.length === 1 || undefined, 10_000, 'the first send');
    await crashedApp.close();
    startWorker(2, { leaseMs: 1_000 });
    await waitFor(async () => (await outboxOf(ids)).every((row) => row.sent_at !== null) || undefined, 10_000, 'the digest marked sent');
    expect(resend.requests).toHaveLength(2);
    const [sent, again] = resend.requests;
    expect(again.idempotencyKey).toBe(sent.idempotencyKey);
    expect(again.replayed).toBe(true);
    expect(ids.map((id) => resend.sentAbout(id).length)).toEqual([1, 1, 1]);
    expect(feedbackIdsIn(sent, ids).sort()).toEqual([...ids].sort());
  });

  it('claims at the same moment on eight connections share one window: no more e-mails than the cap', async () => {
    await insertFeedbackRows(sql, 20);
    const cap = { perWindow: 3, windowMs: WINDOW_MS, digestMaxItems: 1 };
    // Eight connections open first, so the claims run side by side, not one after another as each connects.
    await Promise.all(Array.from({ length: 8 }, () => app.db.sql`select pg_sleep(0.2)`));
    const claims = await Promise.all(Array.from({ length: 8 }, () => claimDueMailsElevated(app.db.sql, randomUUID(), 60_000, 50, cap)));
    const mails = claims.flat();
    // Without the lock each claim counted an empty window, and together they claimed every row.
    expect(mails).toHaveLength(3);
    expect(new Set(mails.flatMap((mail) => mail.claims.map((claim) => claim.id))).size).toBe(3);
    expect(await emailsClaimed()).toBe(3);
  });

  it('two instances at once never send more than the cap in a window, nor any notification twice', { timeout: 40_000 }, async () => {
    resend.latencyMs = 30;
    startWorker(3);
    startWorker(3, { on: other });
    const ids: string[] = [];
    const started = Date.now();
    while (Date.now() - started < 2 * WINDOW_MS) {
      ids.push(...(await insertFeedbackRows(sql, 1 + (ids.length % 3))));
      await pause(100);
    }
    await waitFor(async () => (await outboxOf(ids)).every((row) => row.sent_at !== null) || undefined, 4 * WINDOW_MS + 10_000, 'every notification sent');
    await pause(300);
    expect(resend.requests.every((request) => request.status === 200 && !request.replayed)).toBe(true);
    expect(ids.filter((id) => resend.sentAbout(id).length !== 1)).toEqual([]);
    expect(resend.requests).toHaveLength(await emailsClaimed());
    expect(await mostInOneWindow()).toBe(3);
    // Most went in digests: some hundred notifications in about four windows of 3 e-mails.
    expect(resend.requests.length).toBeLessThan(ids.length / 4);
  });
});

/** Each row's tries and whether it was given up, the most tried first. */
const triesOf = (feedbackIds: string[]) =>
  sql<{ feedback_id: string; attempts: number; gave_up: boolean }[]>`
    select feedback_id, attempts, gave_up_at is not null as gave_up from public.feedback_outbox
     where feedback_id = any(${feedbackIds}::uuid[]) order by attempts desc, feedback_id`;

describe('a failed try counts per notification, and a notification keeps its key', () => {
  it('a digest whose rows were tried unequally: only the row at its limit is given up, the rest go out later under the key of their set', async () => {
    const [old, ...fresh] = await insertFeedbackRows(sql, 6);
    // One row failed 9 of its 10 tries before it joined (a digest formed before only never-tried rows could join one).
    const formed = randomUUID();
    await sql`update public.feedback_outbox set digest_id = ${formed} where feedback_id = any(${[old, ...fresh]}::uuid[])`;
    await sql`update public.feedback_outbox set attempts = 9 where feedback_id = ${old}`;
    resend.mode = 'down';
    startWorker(1, { maxAttempts: 10 });
    await waitFor(async () => (await triesOf([old]))[0].gave_up || undefined, 10_000, 'the old row given up');
    expect(resend.requests).toHaveLength(1);
    // Before, the digest was given up by its most tried row: the five fresh ones after one try.
    expect((await triesOf(fresh)).map(({ attempts, gave_up }) => ({ attempts, gave_up }))).toEqual(Array(5).fill({ attempts: 1, gave_up: false }));

    resend.mode = 'up';
    await until(1, 'the digest of the five');
    await pause(300);
    expect(accepted()).toHaveLength(1);
    const [digest] = accepted();
    expect(feedbackIdsIn(digest, [old, ...fresh])).toEqual(fresh);
    expect(digest.body.subject).toBe('New Feedback Submissions (5)');
    const rows = await outboxOf(fresh);
    expect(rows.every((row) => row.sent_at !== null && row.digest_id === formed)).toBe(true);
    const message = { from: FROM, to: NOTIFY, subject: digest.body.subject, html: digest.body.html, text: digest.body.text };
    expect(digest.idempotencyKey).toBe(digestIdempotencyKeyFor(rows.map((row) => row.id), message));
    expect((await outboxOf([old]))[0].sent_at).toBeNull();
  });

  it('a notification sent alone whose mark a crash lost goes again alone under its key, not in the digest a backlog past the cap forms', async () => {
    const [first] = await insertFeedbackRows(sql, 1);
    const config = cappedConfig(3);
    const crashedApp = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false' });
    const real = createMailTransport(config)!;
    const crashing: MailTransport = { ...real, send: async (mail, key) => (await real.send(mail, key), new Promise<never>(() => {})) };
    createWorker(crashedApp.db.sql, config, crashing, log, { capWindowMs: WINDOW_MS, leaseMs: 1_000 }).start();
    await waitFor(() => resend.requests.length === 1 || undefined, 10_000, 'the single notification sent');
    await crashedApp.close();
    real.close();
    // Five more while its claim holds; then its lease runs out: 6 due, room for 2 in the window.
    const backlog = await insertFeedbackRows(sql, 5);
    await pause(1_200);
    startWorker(3, { leaseMs: 1_000 });
    await waitFor(async () => (await outboxOf([first, ...backlog])).every((row) => row.sent_at !== null) || undefined, 10_000, 'every notification sent');
    await pause(300);
    expect(resend.sentAbout(first)).toHaveLength(1);
    const [outbox] = await outboxOf([first]);
    const aboutFirst = resend.about(first);
    expect(aboutFirst.map((request) => request.replayed)).toEqual([false, true]);
    for (const request of aboutFirst) expect(request.idempotencyKey).toMatch(new RegExp(`^feedback-notification-${outbox.id}-[0-9a-f]{16}$`));
    expect(outbox.digest_id).toBeNull();
    const digests = accepted().filter((request) => request.body.subject.startsWith('New Feedback Submissions'));
    expect(digests.map((request) => feedbackIdsIn(request, backlog))).toEqual([backlog]);
    expect(resend.requests).toHaveLength(3);
  });
  it('a given-up notification requeued as docs/feedback.md says goes again alone under its key, never into a digest', async () => {
    const [requeued] = await insertFeedbackRows(sql, 1);
    // Tried alone before: a try may have reached the provider under its own key.
    await sql`update public.feedback_outbox set attempts = 3, last_error = 'resend 503', gave_up_at = now() where feedback_id = ${requeued}`;
    await sql`update public.feedback_outbox set gave_up_at = null, attempts = 0, next_attempt_at = now() where gave_up_at is not null`;
    const backlog = await insertFeedbackRows(sql, 5);
    startWorker(3);
    await waitFor(async () => (await outboxOf([requeued, ...backlog])).every((row) => row.sent_at !== null) || undefined, 10_000, 'every notification sent');
    const [outbox] = await outboxOf([requeued]);
    expect(outbox.digest_id).toBeNull();
    expect(resend.about(requeued).map((request) => request.idempotencyKey)).toEqual([expect.stringMatching(new RegExp(`^feedback-notification-${outbox.id}-`))]);
  });
});

describe('a cap above the claim batch (50)', () => {
  const claimRound = async (perWindow: number) =>
    (await claimDueMailsElevated(app.db.sql, randomUUID(), 60_000, 50, { perWindow, windowMs: 60_000, digestMaxItems: 100 })).map((mail) =>
      mail.digest ? `digest of ${mail.claims.length}` : 'alone',
    );

  it('60 due with room for 100: each alone, 50 a round', async () => {
    await insertFeedbackRows(sql, 60);
    expect([await claimRound(100), await claimRound(100)]).toEqual([Array(50).fill('alone'), Array(10).fill('alone')]);
    expect(await emailsClaimed()).toBe(60);
  });

  it('60 due with room for 55: past the room, one digest', async () => {
    await insertFeedbackRows(sql, 60);
    expect(await claimRound(55)).toEqual(['digest of 60']);
  });
});

describe('the cap on /metrics', () => {
  it('feedback_outbox_cap_room: the e-mails the last hour still allows, counted as the claims count them; no sample without a cap', async () => {
    const METRICS_TOKEN = 'metrics-token-for-the-digest-tests-0123456789';
    const capped = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false', METRICS_TOKEN, FEEDBACK_NOTIFICATIONS_PER_HOUR: '5' });
    const uncapped = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false', METRICS_TOKEN });
    try {
      const [a, b, c, d] = await insertFeedbackRows(sql, 5);
      // Within the hour: a digest of two rows and one alone (2 e-mails); two hours ago: one; never: one.
      await sql`update public.feedback_outbox set claimed_at = now(), digest_id = ${randomUUID()} where feedback_id = any(${[a, b]}::uuid[])`;
      await sql`update public.feedback_outbox set claimed_at = now() - interval '1 minute' where feedback_id = ${c}`;
      await sql`update public.feedback_outbox set claimed_at = now() - interval '2 hours' where feedback_id = ${d}`;
      const scrape = async (on: FastifyInstance) => {
        const response = await on.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
        expect(response.statusCode).toBe(200);
        return response.body;
      };
      expect(await scrape(capped)).toMatch(/^feedback_outbox_cap_room 3$/m);
      const withoutCap = await scrape(uncapped);
      expect(withoutCap).toContain('# TYPE feedback_outbox_cap_room gauge');
      expect(withoutCap).not.toMatch(/^feedback_outbox_cap_room /m);
      expect(withoutCap).toMatch(/^feedback_outbox_owed 5$/m);
    } finally {
      await capped.close();
      await uncapped.close();
    }
  });
});
