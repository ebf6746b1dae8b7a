import { createHash, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../../config.ts';
import { retryDelayMs } from '../../../lib/backoff.ts';
import type { ElevatedSql } from '../../../plugins/db.ts';
import { DeliveryError, type MailTransport, SEND_TIMEOUT_MS } from './mail-transport.ts';
import {
  type ClaimedMail,
  claimDueMailsElevated,
  giveUpDigestElevated,
  type NotificationCap,
  notificationsPerHour,
  scheduleDigestRetryElevated,
} from './capped-claims.ts';
import { DIGEST_MAX_ITEMS, renderFeedbackDigest } from './digest.ts';
import { adminUrl, renderFeedbackNotification } from './notification.ts';
import {
  adminRecipientEmailsElevated,
  type ClaimedNotification,
  extendNotificationClaimsElevated,
  giveUpNotificationElevated,
  releaseNotificationClaimsElevated,
  scheduleNotificationRetryElevated,
} from './queries.ts';
import { createSentMarks, type SentMarks } from './sent-marks.ts';

// The worker that empties the feedback outbox (docs/feedback.md; plugin.ts
// starts it when the app is ready and stops it before it closes). It claims
// a batch of due rows in one statement and sends them a few at a time over
// the transport's pooled connections. Each row is written as its own send
// ends: marked sent (in small groups, sent-marks.ts), retried with
// exponential backoff, or given up after FEEDBACK_OUTBOX_MAX_ATTEMPTS; no
// row's outcome waits on another's. While marks fail (the database is down),
// the batch starts no new send: its failed marks are tried again until the
// lease ends, and the rows not started wait, so an outage shorter than the
// lease sends no row twice. Under the cap on e-mails per hour
// (capped-claims.ts), a batch may hold digests: one e-mail for several rows,
// sent and marked as one, its failed tries counted per row.

/** Rows claimed at once. */
export const CLAIM_BATCH = 50;
/**
 * How long a claim holds its rows: a whole batch sent at the lowest
 * concurrency, with room to spare. A batch still sending renews it every
 * third of it (an SMTP server may answer slowly without ever going quiet for
 * the socket timeout), so the lease only decides how soon the rows of a
 * worker that died are sent by another.
 */
export const CLAIM_LEASE_MS = Math.ceil(CLAIM_BATCH / 2) * SEND_TIMEOUT_MS;

/** An owed notification tried this many times means deliveries are failing. */
export const FAILING_AFTER_ATTEMPTS = 3;

/** The window FEEDBACK_NOTIFICATIONS_PER_HOUR counts e-mails in. */
export const CAP_WINDOW_MS = 3_600_000;

const sha256Hex16 = (text: string) => createHash('sha256').update(text).digest('hex').slice(0, 16);

/** Stable per message: a retry of the same e-mail carries the same key, a changed e-mail a new one. */
export function idempotencyKeyFor(outboxId: string, content: unknown): string {
  return `feedback-notification-${outboxId}-${sha256Hex16(JSON.stringify(content))}`;
}

/**
 * A digest's key: from the set of outbox ids it carries (in any order) and
 * its content, so a digest sent again after a crash or a lost answer is
 * dropped by the provider, and a changed one (a feedback deleted meanwhile,
 * another admin list) is a new message.
 */
export function digestIdempotencyKeyFor(outboxIds: string[], content: unknown): string {
  return `feedback-digest-${sha256Hex16([...outboxIds].sort().join(','))}-${sha256Hex16(JSON.stringify(content))}`;
}

const errorText = (error: unknown) => (error instanceof Error ? error.message : String(error));

/**
 * `capWindowMs` and `digestMaxItems` are the hour and the digest's 100 items
 * unless a test makes them small enough to watch.
 */
export function createWorker(
  sql: ElevatedSql,
  config: Config,
  transport: MailTransport,
  log: FastifyBaseLogger,
  {
    leaseMs = CLAIM_LEASE_MS,
    capWindowMs = CAP_WINDOW_MS,
    digestMaxItems = DIGEST_MAX_ITEMS,
    onSendFailure = () => {},
  }: { leaseMs?: number; capWindowMs?: number; digestMaxItems?: number; /** Each e-mail the provider did not take (the metrics count them). */ onSendFailure?: () => void } = {},
) {
  const base = adminUrl(config);
  const perWindow = notificationsPerHour(config);
  const cap: NotificationCap | undefined = perWindow === 0 ? undefined : { perWindow, windowMs: capWindowMs, digestMaxItems };
  const backoff = { baseMs: config.FEEDBACK_OUTBOX_RETRY_BASE_MS, maxMs: config.FEEDBACK_OUTBOX_RETRY_MAX_MS };
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let wakeRequested = false;
  let stopped = false;
  /** When stop()'s wait ends (`performance.now()`): failed marks are not tried after it. */
  let stopDeadline = Infinity;
  /** Set while a batch is sending: stop() calls it to hand back the batch's rows not started. */
  let interruptBatch: (() => void) | undefined;

  const contextOf = (claim: ClaimedNotification) => ({ outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts });
  const digestContextOf = (mail: ClaimedMail) => ({ digestId: mail.mailId, outboxIds: mail.claims.map((claim) => claim.id), attempts: mailAttempts(mail) });
  const mailAttempts = (mail: ClaimedMail) => Math.max(...mail.claims.map((claim) => claim.attempts));

  async function addressees(recipients: () => Promise<string[]>): Promise<string[]> {
    const to = await recipients();
    if (to.length === 0) throw new DeliveryError('no recipients: FEEDBACK_NOTIFY_EMAILS is empty and no user has the admin role', false);
    return to;
  }

  async function send(mail: ClaimedMail, recipients: () => Promise<string[]>): Promise<string | undefined> {
    if (!mail.digest) {
      const [claim] = mail.claims;
      if (!claim.feedback) throw new DeliveryError('feedback row not found', true);
      const message = { from: config.EMAIL_FROM, to: await addressees(recipients), ...renderFeedbackNotification(claim.feedback, base) };
      return (await transport.send(message, idempotencyKeyFor(claim.id, message))).providerMessageId;
    }
    const items = mail.claims.flatMap((claim) => (claim.feedback ? [claim.feedback] : []));
    const message = { from: config.EMAIL_FROM, to: await addressees(recipients), ...renderFeedbackDigest(items, base) };
    return (await transport.send(message, digestIdempotencyKeyFor(mail.claims.map((claim) => claim.id), message))).providerMessageId;
  }

  async function recordFailure(claim: ClaimedNotification, error: unknown): Promise<void> {
    const context = { ...contextOf(claim), error: errorText(error) };
    if ((error instanceof DeliveryError && error.permanent) || claim.attempts >= config.FEEDBACK_OUTBOX_MAX_ATTEMPTS) {
      log.error(context, 'feedback notification given up');
      await giveUpNotificationElevated(sql, claim, context.error);
    } else {
      const delayMs = retryDelayMs(claim.attempts, backoff);
      log.warn({ ...context, retryInMs: delayMs }, 'feedback notification failed; will retry');
      await scheduleNotificationRetryElevated(sql, claim, delayMs, context.error);
    }
  }

  /**
   * A digest's failed try, counted per row: a refusal for good gives up every
   * row; otherwise only the rows at FEEDBACK_OUTBOX_MAX_ATTEMPTS are given
   * up, and the rest are retried together, after one backoff (from the
   * least tried, so none waits longer than its own). A digest's rows are
   * tried together from their first try (capped-claims.ts), so they give up
   * together too; a digest formed otherwise (before that rule) goes on with
   * the rows still owed, under the key of that smaller set.
   */
  async function recordDigestFailure(mail: ClaimedMail, error: unknown): Promise<void> {
    const context = { ...digestContextOf(mail), error: errorText(error) };
    const refused = error instanceof DeliveryError && error.permanent;
    const spent = mail.claims.filter((claim) => refused || claim.attempts >= config.FEEDBACK_OUTBOX_MAX_ATTEMPTS);
    const owed = mail.claims.filter((claim) => !spent.includes(claim));
    if (spent.length > 0) {
      log.error({ ...context, outboxIds: spent.map((claim) => claim.id) }, 'feedback notification digest given up');
      await giveUpDigestElevated(sql, spent, context.error);
    }
    if (owed.length > 0) {
      const delayMs = retryDelayMs(Math.min(...owed.map((claim) => claim.attempts)), backoff);
      log.warn({ ...context, outboxIds: owed.map((claim) => claim.id), retryInMs: delayMs }, 'feedback notification digest failed; will retry');
      await scheduleDigestRetryElevated(sql, owed, delayMs, context.error);
    }
  }

  /**
   * Sends one claimed e-mail (a notification, or a digest) and writes how it
   * ended. Never throws: rows whose outcome cannot be written keep their
   * claim until the lease runs out, and only they are tried again.
   */
  async function deliver(claimed: ClaimedMail, recipients: () => Promise<string[]>, sentMarks: SentMarks): Promise<void> {
    let mail = claimed;
    if (mail.digest) {
      // A claimed row whose feedback is gone: given up, as alone it would be; the digest carries the rest.
      const gone = mail.claims.filter((claim) => !claim.feedback);
      if (gone.length > 0) {
        await giveUpDigestElevated(sql, gone, 'feedback row not found').catch((error) =>
          log.error({ outboxIds: gone.map((claim) => claim.id), err: error }, 'feedback notification failure not recorded; retried when its claim runs out'),
        );
        mail = { ...mail, claims: mail.claims.filter((claim) => claim.feedback) };
        if (mail.claims.length === 0) return;
      }
    }
    let providerMessageId: string | undefined;
    try {
      providerMessageId = await send(mail, recipients);
    } catch (error) {
      onSendFailure();
      const recorded = mail.digest ? recordDigestFailure(mail, error) : recordFailure(mail.claims[0], error);
      await recorded.catch((writeError) =>
        log.error(
          { ...(mail.digest ? digestContextOf(mail) : contextOf(mail.claims[0])), err: writeError },
          'feedback notification failure not recorded; retried when its claim runs out',
        ),
      );
      return;
    }
    // Between the provider's acceptance and this mark, a crash sends it again (same key, same Message-ID).
    for (const claim of mail.claims) sentMarks.add({ claim, providerMessageId });
  }

  /**
   * Sends a claimed batch, `transport.concurrency` at a time, renewing its
   * lease; on stop, rows not started go back at once. `lease.endsAt` is when
   * the claim (or its last renewal) was asked for, plus the lease: the rows
   * are ours at least until then.
   */
  async function deliverBatch(claimToken: string, mails: ClaimedMail[], lease: { endsAt: number }): Promise<void> {
    const renewal = setInterval(() => {
      const askedAt = performance.now();
      void extendNotificationClaimsElevated(sql, claimToken, leaseMs).then(
        () => (lease.endsAt = Math.max(lease.endsAt, askedAt + leaseMs)),
        (error) => log.warn({ err: error }, 'feedback notification lease not renewed; rows of a batch slower than its lease may be sent twice'),
      );
    }, leaseMs / 3);
    try {
      await sendBatch(mails, lease);
    } finally {
      clearInterval(renewal);
    }
  }

  async function sendBatch(mails: ClaimedMail[], lease: { endsAt: number }): Promise<void> {
    // Recipients are looked up once per batch, and only if some row needs them.
    let recipients: Promise<string[]> | undefined;
    const lookUpRecipients = () =>
      (recipients ??= config.FEEDBACK_NOTIFY_EMAILS.length > 0 ? Promise.resolve(config.FEEDBACK_NOTIFY_EMAILS) : adminRecipientEmailsElevated(sql));
    const sentMarks = createSentMarks(sql, log, transport.name, { retryUntil: () => Math.min(lease.endsAt, stopDeadline) });
    const notStarted = [...mails];
    const sender = async () => {
      // A failed mark holds the next send back until marks are written again (sent-marks.ts).
      while ((await sentMarks.writable()) && !stopped) {
        // Renewals fail too while the database is down: a batch whose lease is running out
        // (unseen by the renewals every third of it) ends, and its rows not started wait for it.
        if (lease.endsAt - performance.now() < leaseMs / 3) return;
        const mail = notStarted.shift();
        if (!mail) return;
        await deliver(mail, lookUpRecipients, sentMarks);
      }
    };
    const senders = Promise.all(Array.from({ length: Math.min(transport.concurrency, mails.length) }, sender));
    // On stop, released without waiting for the sends in flight, which may outlast the shutdown's share.
    const interrupted = new Promise<void>((resolve) => (interruptBatch = resolve));
    await Promise.race([senders, interrupted]);
    interruptBatch = undefined;
    const released = notStarted.splice(0);
    const releasedClaims = released.flatMap((mail) => mail.claims);
    await releaseNotificationClaimsElevated(sql, releasedClaims).catch((error) =>
      log.error({ err: error, outboxIds: releasedClaims.map((claim) => claim.id) }, 'feedback notification claims not released; they return when the lease runs out'),
    );
    await senders;
    await sentMarks.settled();
  }

  /** Sends due rows, batch after batch, until none is due or the worker stops. */
  async function drain(): Promise<void> {
    while (!stopped) {
      const claimToken = randomUUID();
      const askedAt = performance.now();
      const mails = await claimDueMailsElevated(sql, claimToken, leaseMs, CLAIM_BATCH, cap);
      if (mails.length === 0) return;
      await deliverBatch(claimToken, mails, { endsAt: askedAt + leaseMs });
    }
  }

  function schedule(delayMs: number) {
    clearTimeout(timer);
    timer = setTimeout(run, delayMs);
  }

  function run() {
    if (stopped || running) return;
    wakeRequested = false;
    running = drain()
      .catch((error) => log.error({ err: error }, 'feedback outbox pass failed'))
      .finally(() => {
        running = undefined;
        if (!stopped) schedule(wakeRequested ? 0 : config.FEEDBACK_OUTBOX_POLL_MS);
      });
  }

  return {
    start: () => schedule(0),
    wake() {
      if (stopped) return;
      if (running) wakeRequested = true;
      else schedule(0);
    },
    /**
     * Starts no new send, gives back the rows not started, and waits up to
     * `timeoutMs` for the sends in flight to end and be marked (failed marks
     * are tried until then). One still in flight, or unmarked, then keeps its
     * claim until the lease runs out.
     */
    async stop(timeoutMs: number): Promise<void> {
      stopped = true;
      stopDeadline = performance.now() + timeoutMs;
      clearTimeout(timer);
      interruptBatch?.();
      if (!running) return;
      let deadline: NodeJS.Timeout | undefined;
      const timedOut = new Promise<'timed out'>((resolve) => (deadline = setTimeout(resolve, timeoutMs, 'timed out')));
      const ended = await Promise.race([running.then(() => 'ended' as const), timedOut]);
      clearTimeout(deadline);
      if (ended === 'timed out') log.warn({ timeoutMs }, 'feedback outbox: sends still in flight at shutdown; their rows wait for the lease');
    },
  };
}
