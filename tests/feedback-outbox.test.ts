import type { AddressInfo } from 'node:net';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import PostalMime from 'postal-mime';
import { SMTPServer } from 'smtp-server';
import { afterAll, afterEach, beforeEach, describe, expect, inject, it } from 'vitest';
import { shutdownBudget } from '../src/lib/shutdown-budget.ts';
import pino from 'pino';
import { loggerOptions } from '../src/logger.ts';
import { createMailTransport } from '../src/modules/feedback/outbox/mail-transport.ts';
import { CLAIM_BATCH, createWorker } from '../src/modules/feedback/outbox/worker.ts';
import { buildTestApp, testConfig } from './support/app.ts';
import { createAuthUser, grantRole, testSql, uniqueEmail } from './support/db.ts';
import { feedbackBody, insertFeedbackRows, waitFor } from './support/feedback-fixtures.ts';
import { realAuth } from './support/real-auth.ts';
import { type ResendStandIn, startResendStandIn } from './support/resend-stand-in.ts';

// The notification that is never lost (SPEC section 6): the outbox row
// commits with the feedback, a worker sends it through Resend (a loopback
// stand-in here) or SMTP (the stack's sink), retries with backoff while the
// provider is down, survives a restart, and two workers never send one
// e-mail twice. Each test makes its own feedback and looks only at it.

const sql = testSql();
const NOTIFY = ['triage-a@example.test', 'triage-b@example.test'];
const ADMIN_URL = 'https://admin.example.test/console';
// Fast polling and backoff so retries happen within a test.
const FAST_WORKER = {
  FEEDBACK_OUTBOX_WORKER: 'true', // off by default in test apps
  FEEDBACK_OUTBOX_POLL_MS: '25',
  FEEDBACK_OUTBOX_RETRY_BASE_MS: '20',
  FEEDBACK_OUTBOX_RETRY_MAX_MS: '100',
  FEEDBACK_OUTBOX_MAX_ATTEMPTS: '1000',
};

// The resend package would read this; our code passes the base URL from Config instead.
const envBaseUrl = process.env.RESEND_BASE_URL;
process.env.RESEND_BASE_URL = 'http://127.0.0.1:9/not-the-stand-in';

let resend: ResendStandIn;
const apps: FastifyInstance[] = [];
const sinks: SlowSmtpSink[] = [];

beforeEach(async () => {
  resend = await startResendStandIn();
});
afterEach(async () => {
  await Promise.all(apps.splice(0).map((app) => app.close()));
  await Promise.all(sinks.splice(0).map((sink) => sink.stop()));
  await resend.stop();
});
afterAll(async () => {
  process.env.RESEND_BASE_URL = envBaseUrl;
  await sql.end();
});

/** An app whose worker sends through `transport`'s settings to NOTIFY, closed after the file. */
async function notifyingApp(transport: Record<string, string>, overrides: Record<string, string>): Promise<FastifyInstance> {
  const app = await buildTestApp({
    ...transport,
    EMAIL_FROM: 'Portfolio Feedback <feedback@example.test>',
    FEEDBACK_NOTIFY_EMAILS: NOTIFY.join(', '),
    ADMIN_URL,
    ...FAST_WORKER,
    ...overrides,
  });
  apps.push(app);
  return app;
}

const resendApp = (overrides: Record<string, string> = {}) => notifyingApp({ RESEND_API_KEY: 're_test_key', RESEND_BASE_URL: resend.url }, overrides);

async function submit(app: FastifyInstance, overrides: Record<string, unknown> = {}): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody(overrides) });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

/**
 * An SMTP sink of the test's own, unlike the stack's: it takes `delayMs` to
 * accept each message, keeps each accepted message's Message-ID and the
 * feedback it is about, and can refuse one message with a 451.
 */
interface SlowSmtpSink {
  port: number;
  delayMs: number;
  accepted: { messageId: string; feedbackId: string }[];
  /** Answers 451 to the message about `feedbackId`, after `before()` resolves. */
  refuse?: { feedbackId: string; before: () => Promise<void> };
  refused: number;
  /** Accepted messages about these feedback ids. */
  acceptedAbout(ids: string[]): { messageId: string; feedbackId: string }[];
  stop(): Promise<void>;
}

async function startSlowSmtpSink(): Promise<SlowSmtpSink> {
  let stopping = false;
  const waits = new Set<() => void>();
  // A delay that the sink's stop cuts short, so a hung send does not hold the test's clean-up.
  const pause = (ms: number) =>
    new Promise<void>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        waits.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      waits.add(done);
    });
  const smtp = new SMTPServer({
    secure: false,
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    async onData(stream, _session, callback) {
      const chunks: Buffer[] = [];
      for await (const chunk of stream) chunks.push(chunk as Buffer);
      const parsed = await PostalMime.parse(Buffer.concat(chunks));
      const feedbackId = /\/feedback\/([0-9a-f-]{36})/.exec(parsed.text ?? '')?.[1] ?? '';
      if (sink.refuse && sink.refuse.feedbackId === feedbackId) {
        await sink.refuse.before();
        sink.refused += 1;
        return callback(Object.assign(new Error('Try again later'), { responseCode: 451 }));
      }
      await pause(sink.delayMs);
      if (stopping) return callback(Object.assign(new Error('Shutting down'), { responseCode: 421 }));
      sink.accepted.push({ messageId: parsed.messageId ?? '', feedbackId });
      callback();
    },
  });
  await new Promise<void>((resolve) => smtp.server.listen(0, '127.0.0.1', resolve));
  const sink: SlowSmtpSink = {
    port: (smtp.server.address() as AddressInfo).port,
    delayMs: 0,
    accepted: [],
    refused: 0,
    acceptedAbout: (ids) => sink.accepted.filter((message) => ids.includes(message.feedbackId)),
    async stop() {
      stopping = true;
      for (const done of [...waits]) done();
      await new Promise<void>((resolve) => smtp.close(() => resolve()));
    },
  };
  sinks.push(sink);
  return sink;
}

const smtpApp = (sink: SlowSmtpSink, overrides: Record<string, string> = {}) => notifyingApp({ SMTP_URL: `smtp://127.0.0.1:${sink.port}` }, overrides);

const insertFeedback = (count: number) => insertFeedbackRows(sql, count);

async function closeApp(app: FastifyInstance): Promise<number> {
  const started = performance.now();
  await app.close();
  apps.splice(apps.indexOf(app), 1);
  return performance.now() - started;
}

const outboxOf = async (feedbackId: string) =>
  (await sql`select id, attempts, sent_at, gave_up_at, last_error, provider_message_id from public.feedback_outbox where feedback_id = ${feedbackId}`)[0];

describe('notification e-mail', () => {
  it('through Resend: subject, sender, recipients, escaped HTML, text, direct link, idempotency key', async () => {
    const app = await resendApp();
    expect(app.feedbackOutbox.transport).toBe('resend');
    const id = await submit(app, {
      name: 'Eve <script>',
      email: "eve.o'neil@example.test",
      rating: 2,
      comment: 'The <script>alert("x")</script> tag & friends\nshow up raw.',
      category: 'Bug Report',
      location: 'https://example.test/contact?a=1&b=2',
    });
    const [request] = await waitFor(() => resend.sentAbout(id).length === 1 && resend.sentAbout(id), 10_000, 'the e-mail');
    const outbox = await waitFor(async () => {
      const row = await outboxOf(id);
      return row.sent_at !== null && row;
    });

    expect(request.authorization).toBe('Bearer re_test_key');
    expect(request.userAgent).toBe('portfolio-backend');
    expect(request.idempotencyKey).toMatch(new RegExp(`^feedback-notification-${outbox.id}-[0-9a-f]{16}$`));
    expect(request.body).toMatchObject({ from: 'Portfolio Feedback <feedback@example.test>', to: NOTIFY, subject: 'New Feedback Submission' });

    const link = `${ADMIN_URL}/feedback/${id}`;
    // Plain text: the words as typed.
    for (const line of [
      'Name: Eve <script>',
      "Email: eve.o'neil@example.test",
      'Rating: 2 / 5',
      'Category: Bug Report',
      'Location: https://example.test/contact?a=1&b=2',
      // The comment's lines are quoted.
      '> The <script>alert("x")</script> tag & friends\n> show up raw.',
      `Open it: ${link}`,
    ]) {
      expect(request.body.text).toContain(line);
    }
    // HTML: escaped exactly once, never live markup.
    expect(request.body.html).not.toContain('<script>');
    expect(request.body.html).toContain('Eve &lt;script&gt;');
    expect(request.body.html).toContain('The &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; tag &amp; friends');
    expect(request.body.html).toContain('eve.o&#39;neil@example.test');
    expect(request.body.html).toContain('https://example.test/contact?a=1&amp;b=2');
    expect(request.body.html).toContain(`<a href="${link}">`);
    expect(request.body.html).not.toContain('&amp;lt;');

    expect(outbox).toMatchObject({ attempts: 1, gave_up_at: null, last_error: null, provider_message_id: expect.stringMatching(/^stand-in-/) });
  });

  it('through SMTP into the stack sink, read back over its HTTP API', async () => {
    const recipient = uniqueEmail('smtp-triage');
    const app = await buildTestApp({
      SMTP_URL: `smtp://127.0.0.1:${inject('stack').smtpPort}`,
      EMAIL_FROM: 'Portfolio Feedback <feedback@example.test>',
      FEEDBACK_NOTIFY_EMAILS: recipient,
      ADMIN_URL,
      ...FAST_WORKER,
    });
    apps.push(app);
    expect(app.feedbackOutbox.transport).toBe('smtp');
    const id = await submit(app, { comment: 'Sent through <SMTP> & read back', category: 'Feature Request' });

    type Message = { to: string[]; from: string; subject: string; text: string; html: string };
    const message = await waitFor(async () => {
      const messages = (await (await fetch(`${inject('stack').mailApiUrl}/messages`)).json()) as Message[];
      return messages.find((m) => m.to.includes(recipient) && m.text.includes(id));
    }, 10_000, 'the SMTP message');
    expect(message.subject).toBe('New Feedback Submission');
    expect(message.from).toBe('feedback@example.test');
    expect(message.text).toContain('Sent through <SMTP> & read back');
    expect(message.text).toContain('Category: Feature Request');
    expect(message.text).toContain(`${ADMIN_URL}/feedback/${id}`);
    expect(message.html).toContain('Sent through &lt;SMTP&gt; &amp; read back');
    await waitFor(async () => (await outboxOf(id)).sent_at !== null);
  });

  it('without FEEDBACK_NOTIFY_EMAILS it goes to every user with the admin role', async () => {
    const admin = await createAuthUser(sql, { email: uniqueEmail('admin-recipient') });
    await grantRole(sql, admin.id, 'admin');
    const editor = await createAuthUser(sql, { email: uniqueEmail('editor-not-recipient') });
    await grantRole(sql, editor.id, 'editor');
    const app = await resendApp({ FEEDBACK_NOTIFY_EMAILS: '' });
    const id = await submit(app);
    const [request] = await waitFor(() => resend.sentAbout(id).length === 1 && resend.sentAbout(id));
    expect(request.body.to).toContain(admin.email);
    expect(request.body.to).not.toContain(editor.email);
  });

  // Bans are columns of the auth server's own auth.users: without the auth server, this database has the first generation of the table.
  it.runIf(realAuth())("a banned admin gets none (a ban ends the e-mails as it ends the API); one whose ban has run out gets it again", async () => {
    // A ban (the dashboard's, the admin API's ban_duration) keeps the account and its roles: the
    // API refused the banned admin's tokens, but every new feedback (name, e-mail, comment of
    // its submitter) still went to their mailbox.
    const [{ present }] = await sql`
      select count(*) = 2 as present from information_schema.columns
       where table_schema = 'auth' and table_name = 'users' and column_name in ('banned_until', 'deleted_at')`;
    expect(present, "the auth server's auth.users, with banned_until and deleted_at").toBe(true);
    const active = await createAuthUser(sql, { email: uniqueEmail('admin-active') });
    const banned = await createAuthUser(sql, { email: uniqueEmail('admin-banned') });
    const banOver = await createAuthUser(sql, { email: uniqueEmail('admin-ban-over') });
    for (const user of [active, banned, banOver]) await grantRole(sql, user.id, 'admin');
    await sql`update auth.users set banned_until = now() + interval '1 day' where id = ${banned.id}`;
    await sql`update auth.users set banned_until = now() - interval '1 minute' where id = ${banOver.id}`;
    const app = await resendApp({ FEEDBACK_NOTIFY_EMAILS: '' });
    const id = await submit(app);
    const [request] = await waitFor(() => resend.sentAbout(id).length === 1 && resend.sentAbout(id));
    expect(request.body.to).toEqual(expect.arrayContaining([active.email, banOver.email]));
    expect(request.body.to).not.toContain(banned.email);
  });
});

describe('more recipients than Resend takes in one e-mail', () => {
  // Resend refuses an e-mail to more than 50 addresses with 422, which the
  // worker gives up at once: with 51 admins, no admin heard of any feedback.
  it('120 recipients: sent in parts of at most 50, each address once, each part with a key of its own', async () => {
    const recipients = Array.from({ length: 120 }, (_, index) => `triage-${index}@example.test`);
    const app = await resendApp({ FEEDBACK_NOTIFY_EMAILS: recipients.join(',') });
    const id = await submit(app);
    await waitFor(async () => (await outboxOf(id)).sent_at !== null, 10_000, 'the notification marked sent');
    const requests = resend.about(id);
    for (const request of requests) expect((request.body.to as string[]).length).toBeLessThanOrEqual(50);
    expect(requests.flatMap((request) => request.body.to).sort()).toEqual([...recipients].sort());
    expect(new Set(requests.map((request) => request.idempotencyKey)).size).toBe(requests.length);
    expect((await outboxOf(id)).provider_message_id.split(',')).toHaveLength(requests.length);
  });
});

describe('never lost, never twice', () => {
  it('provider down: the submission still succeeds; after recovery the e-mail arrives exactly once', async () => {
    resend.mode = 'down';
    const metricsToken = 'metrics-token-for-the-outbox-tests-0123';
    const app = await resendApp({ METRICS_TOKEN: metricsToken });
    const started = performance.now();
    const id = await submit(app);
    const submitMs = performance.now() - started;

    // The worker keeps trying, with backoff, while the provider is down. Counted
    // where they were refused: a row's attempts go up when it is claimed, before
    // its send arrives, and a third send still on its way would meet the provider up.
    await waitFor(async () => resend.about(id).filter((r) => r.status === 503).length >= 3, 10_000, 'three failed attempts');
    expect(resend.sentAbout(id)).toHaveLength(0);
    const failing = await outboxOf(id);
    expect(failing).toMatchObject({ sent_at: null, gave_up_at: null, last_error: expect.stringContaining('resend 503') });
    // Each refused try is counted for the alerts (docs/admin.md, "What to alert on").
    const scrape = await app.inject({ url: '/metrics', headers: { authorization: `Bearer ${metricsToken}` } });
    const failures = /^feedback_notification_send_failures_total\{provider="resend"\} (\d+)$/m.exec(scrape.body);
    expect(Number(failures?.[1])).toBeGreaterThanOrEqual(3);

    resend.mode = 'up';
    await waitFor(async () => (await outboxOf(id)).sent_at !== null, 10_000, 'delivery after recovery');
    await new Promise((resolve) => setTimeout(resolve, 300)); // several more poll cycles
    const requests = resend.about(id);
    expect(resend.sentAbout(id)).toHaveLength(1);
    expect(requests.filter((r) => r.status === 200)).toHaveLength(1);
    expect(requests.filter((r) => r.status === 503).length).toBeGreaterThanOrEqual(3);
    // Every try carried the same key, so Resend could drop a repeat.
    expect(new Set(requests.map((r) => r.idempotencyKey)).size).toBe(1);
    const sent = await outboxOf(id);
    expect(sent.attempts).toBe(requests.length);
    expect(sent.last_error).toBeNull();
    console.log(`provider down: 201 in ${submitMs.toFixed(0)} ms; ${requests.length - 1} failed tries, then 1 delivery`);
  });

  it('a restart in between loses nothing', async () => {
    resend.mode = 'down';
    const first = await resendApp();
    const id = await submit(first);
    await waitFor(async () => (await outboxOf(id)).attempts >= 1, 10_000, 'a failed attempt');
    await first.close();
    apps.splice(apps.indexOf(first), 1);
    expect((await outboxOf(id)).sent_at).toBeNull();

    resend.mode = 'up';
    await resendApp(); // a new instance, as after a deploy
    await waitFor(async () => (await outboxOf(id)).sent_at !== null, 10_000, 'delivery by the new instance');
    expect(resend.sentAbout(id)).toHaveLength(1);
  });

  it('two workers on one database never send the same e-mail twice', async () => {
    resend.latencyMs = 15; // sends overlap between the two workers
    const a = await resendApp({ RESEND_API_KEY: 're_worker_a' });
    const b = await resendApp({ RESEND_API_KEY: 're_worker_b' });
    // A backlog that becomes due at one instant, three claim batches long, then both workers race for it.
    const ids = Array.from({ length: 3 * CLAIM_BATCH }, () => crypto.randomUUID());
    await sql`
      insert into public.feedback (id, name, email, comment, rating)
      select id, 'Concurrent Person', 'concurrent@example.test', 'Concurrent feedback for two workers', 3
        from unnest(${ids}::uuid[]) as id`;
    a.feedbackOutbox.wake();
    b.feedbackOutbox.wake();
    await waitFor(
      async () => (await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = any(${ids}::uuid[]) and sent_at is not null`)[0].n === ids.length,
      20_000,
      `all ${ids.length} sent`,
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    for (const id of ids) expect(resend.about(id), id).toHaveLength(1);
    const byWorker = (key: string) => ids.filter((id) => resend.about(id)[0].authorization === `Bearer ${key}`).length;
    console.log(`two workers: worker a sent ${byWorker('re_worker_a')}, worker b sent ${byWorker('re_worker_b')} of ${ids.length}`);
    expect(byWorker('re_worker_a')).toBeGreaterThan(0);
    expect(byWorker('re_worker_b')).toBeGreaterThan(0);
  });

  it('a backlog does not hold a new notification back: it goes out with the first batch, not after the backlog', async () => {
    resend.latencyMs = 5;
    const app = await resendApp({ FEEDBACK_OUTBOX_WORKER: 'false' });
    // 400 notifications owed for an hour, and one new: all due when the worker starts.
    const backlog = Array.from({ length: 8 * CLAIM_BATCH }, () => crypto.randomUUID());
    await sql`
      insert into public.feedback (id, name, email, comment, rating, created_at)
      select id, 'Backlog Person', 'backlog@example.test', 'Feedback that waited in a backlog', 2, now() - interval '1 hour'
        from unnest(${backlog}::uuid[]) as id`;
    await sql`update public.feedback_outbox set created_at = now() - interval '1 hour', next_attempt_at = now() - interval '1 hour'
               where feedback_id = any(${backlog}::uuid[])`;
    const fresh = await submit(app);
    const worker = await resendApp();
    worker.feedbackOutbox.wake();
    await waitFor(async () => (await outboxOf(fresh)).sent_at !== null, 20_000, 'the new notification sent');
    const [{ before }] = await sql`
      select count(*)::int as before from public.feedback_outbox
       where feedback_id = any(${backlog}::uuid[]) and sent_at < (select sent_at from public.feedback_outbox where feedback_id = ${fresh})`;
    // Oldest-first alone would send all 400 first; half of every batch is the newest rows.
    expect(before).toBeLessThanOrEqual(CLAIM_BATCH);
    await waitFor(
      async () => (await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = any(${backlog}::uuid[]) and sent_at is null`)[0].n === 0,
      30_000,
      'the backlog drained',
    );
  });

  it('an instance with the worker switched off sends nothing; the row waits for one that runs it', async () => {
    const quiet = await resendApp({ FEEDBACK_OUTBOX_WORKER: 'false' });
    expect(quiet.feedbackOutbox.transport).toBeNull();
    const id = await submit(quiet);
    await new Promise((resolve) => setTimeout(resolve, 200));
    expect(await outboxOf(id)).toMatchObject({ attempts: 0, sent_at: null });
    await resendApp();
    await waitFor(async () => (await outboxOf(id)).sent_at !== null, 10_000, 'delivery by a worker instance');
    expect(resend.sentAbout(id)).toHaveLength(1);
  });

  it('a message the provider refuses for good is kept as given up after one try', async () => {
    resend.mode = 'refuse';
    const app = await resendApp();
    const id = await submit(app);
    const row = await waitFor(async () => {
      const current = await outboxOf(id);
      return current.gave_up_at !== null && current;
    });
    expect(row).toMatchObject({ attempts: 1, sent_at: null, last_error: expect.stringContaining('resend 422') });
  });

  it('after FEEDBACK_OUTBOX_MAX_ATTEMPTS failed tries the row is kept as given up', async () => {
    resend.mode = 'down';
    const app = await resendApp({ FEEDBACK_OUTBOX_MAX_ATTEMPTS: '3' });
    const id = await submit(app);
    const row = await waitFor(async () => {
      const current = await outboxOf(id);
      return current.gave_up_at !== null && current;
    });
    expect(row).toMatchObject({ attempts: 3, sent_at: null });
    expect(resend.about(id)).toHaveLength(3);
  });

  it('a stop mid-batch: sends in flight are marked as they end, rows not started are released at once, the next worker sends each once', async () => {
    const sink = await startSlowSmtpSink();
    sink.delayMs = 1_500; // 5 sends in flight at a time: 20 rows would take 6 s
    const shutdownTimeoutMs = 4_000;
    const first = await smtpApp(sink, { SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) });
    const ids = await insertFeedback(20);
    first.feedbackOutbox.wake();
    await waitFor(() => sink.acceptedAbout(ids).length >= 5, 10_000, 'the first sends accepted');

    // The close waits for the sends in flight (1.5 s), within the outbox's share of the shutdown, not for the whole batch.
    const closeMs = await closeApp(first);
    expect(closeMs).toBeLessThan(shutdownBudget(shutdownTimeoutMs).drainMs);
    await new Promise((resolve) => setTimeout(resolve, 200));

    const received = new Set(sink.acceptedAbout(ids).map((message) => message.feedbackId));
    const rows = await sql<{ feedback_id: string; sent_at: Date | null; claim_token: string | null; attempts: number; due: boolean }[]>`
      select feedback_id, sent_at, claim_token, attempts, next_attempt_at <= now() as due
        from public.feedback_outbox where feedback_id = any(${ids}::uuid[])`;
    const unsent = rows.filter((row) => !received.has(row.feedback_id));
    expect(unsent.length, 'the stop came before the batch was sent').toBeGreaterThan(0);
    // Every e-mail that reached the sink is marked sent; every other row is free to claim now, with its try given back.
    for (const row of rows.filter((r) => received.has(r.feedback_id))) expect(row.sent_at, row.feedback_id).not.toBeNull();
    for (const row of unsent) expect(row, row.feedback_id).toMatchObject({ sent_at: null, claim_token: null, due: true, attempts: 0 });

    sink.delayMs = 0;
    await smtpApp(sink);
    await waitFor(
      async () => (await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = any(${ids}::uuid[]) and sent_at is null`)[0].n === 0,
      10_000,
      'the released rows sent by the next worker',
    );
    await new Promise((resolve) => setTimeout(resolve, 200));
    const messages = sink.acceptedAbout(ids);
    expect(messages.map((message) => message.feedbackId).sort()).toEqual([...ids].sort());
    expect(new Set(messages.map((message) => message.messageId)).size).toBe(messages.length);
  });

  it('a batch slower than its lease keeps its rows: a second worker sends none of them again', { timeout: 40_000 }, async () => {
    const sink = await startSlowSmtpSink();
    sink.delayMs = 2_000; // 10 rows, 5 at a time: 4 s, against a lease of 1.5 s
    const LEASE_MS = 1_500;
    const config = testConfig({
      ...FAST_WORKER,
      SMTP_URL: `smtp://127.0.0.1:${sink.port}`,
      EMAIL_FROM: 'Portfolio Feedback <feedback@example.test>',
      FEEDBACK_NOTIFY_EMAILS: NOTIFY.join(', '),
      ADMIN_URL,
    });
    const log = pino(loggerOptions('silent', false)) as unknown as FastifyBaseLogger;
    const transports = [createMailTransport(config)!, createMailTransport(config)!];
    const workers = transports.map((transport) => createWorker(sql, config, transport, log, { leaseMs: LEASE_MS }));
    const ids = await insertFeedback(10);
    try {
      workers[0].start();
      await waitFor(() => sink.accepted.length > 0 || undefined, 10_000, 'the first worker sending');
      workers[1].start();
      await waitFor(() => new Set(sink.acceptedAbout(ids).map((message) => message.feedbackId)).size === ids.length, 30_000, 'every row sent');
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 500));
      // Without the renewal, the second worker claimed the rows still waiting when the lease ran out and sent them too.
      expect(sink.acceptedAbout(ids).map((message) => message.feedbackId).sort()).toEqual([...ids].sort());
    } finally {
      await Promise.all(workers.map((worker) => worker.stop(5_000)));
      for (const transport of transports) transport.close();
    }
  });

  it('a send that hangs does not hold the close past the outbox share of the shutdown', async () => {
    const sink = await startSlowSmtpSink();
    sink.delayMs = 30_000; // longer than the send timeout
    const shutdownTimeoutMs = 2_000;
    // Due before the app starts, so its first claim (the newest due rows beside the oldest) takes them:
    // inserted after, they waited behind a first batch of other files' rows hanging at the same sink.
    const ids = await insertFeedback(2);
    const app = await smtpApp(sink, { SHUTDOWN_TIMEOUT_MS: String(shutdownTimeoutMs) });
    app.feedbackOutbox.wake();
    await waitFor(async () => (await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = any(${ids}::uuid[]) and claim_token is not null`)[0].n === 2);
    await new Promise((resolve) => setTimeout(resolve, 200)); // the sends reach the sink

    const closeMs = await closeApp(app);
    const { drainMs, flushMs, closeMs: poolCloseMs } = shutdownBudget(shutdownTimeoutMs);
    expect(closeMs).toBeGreaterThanOrEqual(drainMs - 50);
    expect(closeMs).toBeLessThan(drainMs + flushMs + poolCloseMs);
  });

  it('one row whose retry cannot be scheduled does not leave the delivered rows of its batch unmarked', async () => {
    const sink = await startSlowSmtpSink();
    const ids = await insertFeedback(7);
    const [refusedId, ...deliveredIds] = ids;
    // While the sink answers 451 to one row, another connection holds that row's lock, so the
    // worker's retry UPDATE waits, then fails on the statement timeout.
    let releaseLock = () => {};
    const lockReleased = new Promise<void>((resolve) => (releaseLock = resolve));
    let lockHeld: Promise<unknown> = Promise.resolve();
    let lockedAt = 0;
    sink.refuse = {
      feedbackId: refusedId,
      before: () =>
        new Promise<void>((locked) => {
          lockHeld = sql.begin(async (tx) => {
            await tx`select 1 from public.feedback_outbox where feedback_id = ${refusedId} for update`;
            lockedAt = performance.now();
            locked();
            await lockReleased;
          });
        }),
    };
    const statementTimeoutMs = 300;
    const app = await smtpApp(sink, { DATABASE_STATEMENT_TIMEOUT_MS: String(statementTimeoutMs) });
    app.feedbackOutbox.wake();
    try {
      await waitFor(() => sink.refused === 1, 10_000, 'the 451');
      await waitFor(
        async () =>
          (await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = any(${deliveredIds}::uuid[]) and sent_at is not null`)[0].n ===
          deliveredIds.length,
        5_000,
        'the six delivered rows marked sent',
      );
      // Long enough for the retry UPDATE to have hit its timeout.
      await waitFor(() => performance.now() - lockedAt > 3 * statementTimeoutMs);
    } finally {
      releaseLock();
      await lockHeld;
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
    // The failed row stays claimed (its retry could not be written), for the lease to give it back.
    const refusedRow = await outboxOf(refusedId);
    expect(refusedRow).toMatchObject({ sent_at: null, gave_up_at: null, last_error: null, attempts: 1 });
    expect(sink.acceptedAbout(deliveredIds).map((message) => message.feedbackId).sort()).toEqual([...deliveredIds].sort());
    expect(sink.acceptedAbout([refusedId])).toHaveLength(0);
  });
});
