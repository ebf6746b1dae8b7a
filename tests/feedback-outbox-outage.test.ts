import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import pino from 'pino';
import postgres from 'postgres';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { MailTransport } from '../src/modules/feedback/outbox/mail-transport.ts';
import { createWorker } from '../src/modules/feedback/outbox/worker.ts';
import { buildTestApp, testConfig } from './support/app.ts';
import { insertFeedbackRows, waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// A database outage while a batch is sending (docs/feedback.md, the outbox).
// A failure drill (`pg_ctl stop`, 8 s down) had 84 of 3,084 e-mails sent
// twice: sends went on while the database was down, each "sent" mark failed,
// was never tried again, and the row was claimed and sent again when its
// lease ran out. Here the outage is the worker's own: a database of this
// file's own refuses the app's login role (connection limit 0) and its
// connections are ended, while this file's superuser connection stays. The
// worker runs on the app's real pool; the transport is a stand-in that counts
// what it is given per row and takes a while to accept each message. The last
// test refuses only the lease renewals, through a wrapper of the pool.

const database = await createPrivateDatabase('outbox_outage');
const sql = postgres(database.url, { max: 2, onnotice: () => {} });
const [{ name: databaseName }] = await sql<{ name: string }[]>`select current_database() as name`;

let app: FastifyInstance;
beforeAll(async () => {
  // The worker is created by each test, on this app's pool (`app.db.sql`).
  app = await buildTestApp({ DATABASE_URL: database.url, FEEDBACK_OUTBOX_WORKER: 'false' });
});
afterEach(async () => {
  await sql`alter database ${sql(databaseName)} connection limit -1`;
});
afterAll(async () => {
  await app?.close();
  await sql.end();
  await database.drop();
});

const config = testConfig({
  DATABASE_URL: database.url,
  EMAIL_FROM: 'Portfolio Feedback <feedback@example.test>',
  FEEDBACK_NOTIFY_EMAILS: 'triage@example.test',
  ADMIN_URL: 'https://admin.example.test/console',
  FEEDBACK_OUTBOX_POLL_MS: '25',
  FEEDBACK_OUTBOX_RETRY_BASE_MS: '20',
  FEEDBACK_OUTBOX_RETRY_MAX_MS: '100',
  FEEDBACK_OUTBOX_MAX_ATTEMPTS: '1000',
});

/** What happened, in order: each send the transport was given, each log line, the outage's start and end. */
type Event = ({ kind: 'send'; feedbackId: string } | { kind: 'log'; level: number; msg: string } | { kind: 'down' } | { kind: 'up' }) & { at?: number };

function outageStand(sendMs: number) {
  const events: Event[] = [];
  const accepted: string[] = [];
  const transport: MailTransport = {
    name: 'smtp',
    concurrency: 5,
    async send(mail, idempotencyKey) {
      const feedbackId = /\/feedback\/([0-9a-f-]{36})/.exec(mail.text)?.[1] ?? '';
      events.push({ kind: 'send', feedbackId, at: performance.now() });
      await new Promise((resolve) => setTimeout(resolve, sendMs));
      accepted.push(feedbackId);
      return { providerMessageId: `<${idempotencyKey}@stand-in>` };
    },
    close() {},
  };
  const log = pino(
    { level: 'info' },
    { write: (line: string) => void events.push({ kind: 'log', ...(JSON.parse(line) as { level: number; msg: string }), at: performance.now() }) },
  );
  return { events, accepted, transport, log: log as unknown as FastifyBaseLogger };
}

const insertFeedback = (count: number) => insertFeedbackRows(sql, count);

/** The app's connections refused and ended; this file's superuser connection is not subject to the limit. */
async function takeDatabaseDown(events: Event[]) {
  await sql`alter database ${sql(databaseName)} connection limit 0`;
  await sql`select pg_terminate_backend(pid) from pg_stat_activity where datname = ${databaseName} and application_name = 'portfolio-backend'`;
  events.push({ kind: 'down' });
}

async function bringDatabaseUp(events: Event[]) {
  await sql`alter database ${sql(databaseName)} connection limit -1`;
  events.push({ kind: 'up' });
}

const countsOf = (ids: string[], sent: string[]) => new Map(ids.map((id) => [id, sent.filter((sentId) => sentId === id).length]));
const isMarkFailure = (event: Event) => event.kind === 'log' && event.level >= 40 && event.msg.includes('not marked');
const isMarked = (event: Event) => event.kind === 'log' && event.msg === 'feedback notification sent';
const sendsBetween = (events: Event[], from: number, to: number) => events.slice(from, to).filter((event) => event.kind === 'send').length;

async function allMarked(ids: string[], timeoutMs: number) {
  await waitFor(
    async () => (await sql`select count(*)::int as n from public.feedback_outbox where feedback_id = any(${ids}::uuid[]) and sent_at is null`)[0].n === 0,
    timeoutMs,
    'every notification marked sent',
  );
}

/**
 * Starts `worker`, takes the database down for `downMs` once ten sends were
 * accepted, and waits until every row of `ids` is marked sent. Without the
 * retries, the rows sent during the outage stay unmarked until their lease
 * runs out, then are claimed and sent again: so the wait covers a lease.
 */
async function sendThroughOutage(
  worker: ReturnType<typeof createWorker>,
  stand: { events: Event[]; accepted: unknown[] },
  ids: string[],
  { downMs, leaseMs }: { downMs: number; leaseMs: number },
) {
  try {
    worker.start();
    await waitFor(() => stand.accepted.length >= 10, 10_000, 'the first sends accepted');
    await takeDatabaseDown(stand.events);
    await new Promise((resolve) => setTimeout(resolve, downMs));
    await bringDatabaseUp(stand.events);
    await allMarked(ids, leaseMs + 10_000);
    await new Promise((resolve) => setTimeout(resolve, 300));
  } finally {
    await worker.stop(5_000);
  }
}

describe('a database outage while a batch is sending', () => {
  it('marks that fail are tried again and written when the database answers; no send starts meanwhile; every row is sent once', async () => {
    const LEASE_MS = 6_000;
    const { events, accepted, transport, log } = outageStand(100); // 40 rows, 5 at a time: about 0.8 s
    const worker = createWorker(app.db.sql, config, transport, log, { leaseMs: LEASE_MS });
    const ids = await insertFeedback(40);
    await sendThroughOutage(worker, { events, accepted }, ids, { downMs: 1_500, leaseMs: LEASE_MS });

    const down = events.findIndex((event) => event.kind === 'down');
    const up = events.findIndex((event) => event.kind === 'up');
    const failed = events.findIndex(isMarkFailure);
    expect(failed, 'a mark failed during the outage').toBeGreaterThan(down);
    expect(failed).toBeLessThan(up);
    const markedAgain = events.findIndex((event, index) => index > failed && isMarked(event));
    expect(markedAgain, 'marks written again after the outage').toBeGreaterThan(up);
    // No send started from the first failed mark until a mark was written again.
    expect.soft(sendsBetween(events, failed, markedAgain), 'sends started while marks failed').toBe(0);
    const sentBeforeOutage = sendsBetween(events, 0, down);
    console.log(
      `outage: ${sentBeforeOutage} sends started before it, ${sendsBetween(events, down, failed)} between it and the first failed mark, ` +
        `${sendsBetween(events, markedAgain, events.length)} after marks were written again`,
    );
    expect(sendsBetween(events, markedAgain, events.length), 'rows not started went out after the outage').toBeGreaterThan(0);

    // Each row sent exactly once, claimed once, and marked (those sent before and during the outage too).
    const sent = events.flatMap((event) => (event.kind === 'send' ? [event.feedbackId] : []));
    expect.soft([...countsOf(ids, sent)].filter(([, n]) => n !== 1), 'rows not sent exactly once').toEqual([]);
    const rows = await sql`
      select feedback_id, attempts, claim_token, provider_message_id from public.feedback_outbox
       where feedback_id = any(${ids}::uuid[])`;
    for (const row of rows) expect(row, row.feedback_id).toMatchObject({ attempts: 1, claim_token: null, provider_message_id: expect.stringContaining('@stand-in') });
  });

  it('an outage longer than the lease: sends stop at the first failed mark; the rows not started are sent once, later', { timeout: 30_000 }, async () => {
    const LEASE_MS = 1_500;
    const { events, accepted, transport, log } = outageStand(100);
    const worker = createWorker(app.db.sql, config, transport, log, { leaseMs: LEASE_MS });
    const ids = await insertFeedback(40);
    await sendThroughOutage(worker, { events, accepted }, ids, { downMs: LEASE_MS + 1_000, leaseMs: LEASE_MS });

    const failed = events.findIndex(isMarkFailure);
    const up = events.findIndex((event) => event.kind === 'up');
    expect(failed).toBeGreaterThan(events.findIndex((event) => event.kind === 'down'));
    expect.soft(sendsBetween(events, failed, up), 'sends started while the database was down').toBe(0);
    // Rows sent before the first failed mark may go twice once their lease ran out unmarked (at
    // most the sends then in flight); every other row, held back, goes exactly once.
    const sentBefore = events.slice(0, failed).flatMap((event) => (event.kind === 'send' ? [event.feedbackId] : []));
    const sent = events.flatMap((event) => (event.kind === 'send' ? [event.feedbackId] : []));
    const counts = countsOf(ids, sent);
    const twice = [...counts].filter(([, n]) => n > 1).map(([id]) => id);
    console.log(`outage past the lease: ${twice.length} of ${ids.length} rows sent twice, all among the ${sentBefore.length} sent before the first failed mark`);
    expect([...counts].filter(([, n]) => n === 0 || n > 2)).toEqual([]);
    expect.soft(twice.filter((id) => !sentBefore.includes(id)), 'rows sent twice that were not in flight when marks failed').toEqual([]);
    expect(twice.length).toBeLessThanOrEqual(2 * transport.concurrency);
    expect(ids.filter((id) => !sentBefore.includes(id)).length, 'rows held back by the outage').toBeGreaterThan(0);
  });

  it('a stop during an outage: no send after it, failed marks given up when its wait ends, the rows not started sent once by the next worker', { timeout: 30_000 }, async () => {
    const LEASE_MS = 6_000;
    const STOP_WAIT_MS = 500;
    const first = outageStand(100);
    const worker = createWorker(app.db.sql, config, first.transport, first.log, { leaseMs: LEASE_MS });
    const ids = await insertFeedback(40);
    let stopAt = 0;
    try {
      worker.start();
      await waitFor(() => first.accepted.length >= 10, 10_000, 'the first sends accepted');
      await takeDatabaseDown(first.events);
      await waitFor(() => first.events.some(isMarkFailure), 5_000, 'a failed mark');
      stopAt = performance.now();
      await worker.stop(STOP_WAIT_MS);
      expect(performance.now() - stopAt).toBeLessThan(STOP_WAIT_MS + 1_000);
      // The worker is quiet once its wait (and one retry's pause) is over, long before its lease ends.
      await new Promise((resolve) => setTimeout(resolve, STOP_WAIT_MS + 3_000));
    } finally {
      await worker.stop(0);
    }
    const after = first.events.filter((event) => (event.at ?? 0) > stopAt);
    expect(after.filter((event) => event.kind === 'send'), 'sends started after the stop').toEqual([]);
    expect(after.filter((event) => (event.at ?? 0) > stopAt + STOP_WAIT_MS + 1_800), 'the worker still at work after its stop').toEqual([]);
    expect(after.some((event) => event.kind === 'log' && event.msg.startsWith('feedback notification sent but not marked; sent again')), 'marks given up').toBe(true);

    await bringDatabaseUp(first.events);
    const next = outageStand(0);
    const nextWorker = createWorker(app.db.sql, config, next.transport, next.log, { leaseMs: LEASE_MS });
    try {
      nextWorker.start();
      await allMarked(ids, LEASE_MS + 10_000);
      await new Promise((resolve) => setTimeout(resolve, 300));
    } finally {
      await nextWorker.stop(5_000);
    }
    const sentBy = (events: Event[]) => events.flatMap((event) => (event.kind === 'send' ? [event.feedbackId] : []));
    const sentFirst = sentBy(first.events);
    const counts = countsOf(ids, [...sentFirst, ...sentBy(next.events)]);
    // Sent once, by either worker; twice only if the first sent it and could not mark it.
    expect(ids.filter((id) => !sentFirst.includes(id) && counts.get(id) !== 1), 'rows held back, not sent exactly once').toEqual([]);
    expect([...counts].filter(([, n]) => n === 0 || n > 2)).toEqual([]);
    expect(ids.filter((id) => !sentFirst.includes(id)).length, 'rows the stop held back').toBeGreaterThan(0);
  });

  it('renewals that fail while sends go on: the batch starts no send in the last third of its lease; the rest go back and are sent once', { timeout: 30_000 }, async () => {
    // Only the lease renewal fails (as when a row it updates is locked elsewhere past the
    // statement timeout); claims, sends and marks go on. Two workers, as two instances.
    const LEASE_MS = 3_000;
    const isRenewal = (strings: unknown) => Array.isArray(strings) && strings.join('').includes('set next_attempt_at = now()') && strings.join('').includes('where claim_token =');
    const renewalsRefused = new Proxy(app.db.sql, {
      apply: (target, thisArg, args: unknown[]) =>
        isRenewal(args[0]) ? Promise.reject(new Error('renewal refused by the test')) : Reflect.apply(target, thisArg, args),
    });
    const stands = [outageStand(400), outageStand(400)]; // 50 rows, 5 at a time: 4 s, past the lease
    const workers = stands.map((stand) => createWorker(renewalsRefused, config, stand.transport, stand.log, { leaseMs: LEASE_MS }));
    const ids = await insertFeedback(50);
    try {
      workers[0].start();
      await waitFor(() => stands[0].accepted.length > 0, 10_000, 'the first worker sending');
      workers[1].start();
      await allMarked(ids, 20_000);
      await new Promise((resolve) => setTimeout(resolve, LEASE_MS + 300));
    } finally {
      await Promise.all(workers.map((worker) => worker.stop(5_000)));
    }
    expect(stands[0].events.some((event) => event.kind === 'log' && event.msg.startsWith('feedback notification lease not renewed')), 'renewals refused').toBe(true);
    const sent = stands.flatMap((stand) => stand.events.flatMap((event) => (event.kind === 'send' ? [event.feedbackId] : [])));
    expect([...countsOf(ids, sent)].filter(([, n]) => n !== 1), 'rows not sent exactly once').toEqual([]);
  });
});
