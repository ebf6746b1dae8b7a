import { createHash, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../../config.ts';
import type { ElevatedSql } from '../../../plugins/db.ts';
import { retryDelayMs } from './backoff.ts';
import { DeliveryError, type MailTransport, SEND_TIMEOUT_MS } from './mail-transport.ts';
import { adminUrl, renderFeedbackNotification } from './notification.ts';
import {
  adminRecipientEmailsElevated,
  type ClaimedNotification,
  claimDueNotificationsElevated,
  giveUpNotificationElevated,
  markNotificationsSentElevated,
  scheduleNotificationRetryElevated,
} from './queries.ts';

// The worker that empties the feedback outbox (docs/feedback.md; plugin.ts
// starts it when the app is ready and stops it before it closes). It claims
// a batch of due rows in one statement, sends them a few at a time over the
// transport's pooled connections, and marks the sent ones in one statement;
// a failure is retried with exponential backoff until
// FEEDBACK_OUTBOX_MAX_ATTEMPTS, then the row is kept as given up.

/** Rows claimed at once. */
export const CLAIM_BATCH = 50;
/** How long a claim holds its rows: a whole batch sent at the lowest concurrency, with room to spare. */
export const CLAIM_LEASE_MS = Math.ceil(CLAIM_BATCH / 2) * SEND_TIMEOUT_MS;

/** An owed notification tried this many times means deliveries are failing. */
export const FAILING_AFTER_ATTEMPTS = 3;

/** Stable per message: a retry of the same e-mail carries the same key, a changed e-mail a new one. */
export function idempotencyKeyFor(outboxId: string, content: unknown): string {
  const digest = createHash('sha256').update(JSON.stringify(content)).digest('hex').slice(0, 16);
  return `feedback-notification-${outboxId}-${digest}`;
}

export function createWorker(sql: ElevatedSql, config: Config, transport: MailTransport, log: FastifyBaseLogger) {
  const base = adminUrl(config);
  const backoff = { baseMs: config.FEEDBACK_OUTBOX_RETRY_BASE_MS, maxMs: config.FEEDBACK_OUTBOX_RETRY_MAX_MS };
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let wakeRequested = false;
  let stopped = false;

  /** Sends one claimed notification; a failure is scheduled for retry or given up here. */
  async function deliver(claim: ClaimedNotification, recipients: () => Promise<string[]>): Promise<string | undefined | null> {
    try {
      if (!claim.feedback) throw new DeliveryError('feedback row not found', true);
      const to = await recipients();
      if (to.length === 0) throw new DeliveryError('no recipients: FEEDBACK_NOTIFY_EMAILS is empty and no user has the admin role', false);
      const mail = { from: config.EMAIL_FROM, to, ...renderFeedbackNotification(claim.feedback, base) };
      const { providerMessageId } = await transport.send(mail, idempotencyKeyFor(claim.id, mail));
      return providerMessageId;
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const permanent = error instanceof DeliveryError && error.permanent;
      const context = { outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts, error: message };
      if (permanent || claim.attempts >= config.FEEDBACK_OUTBOX_MAX_ATTEMPTS) {
        log.error(context, 'feedback notification given up');
        await giveUpNotificationElevated(sql, claim, message);
      } else {
        const delayMs = retryDelayMs(claim.attempts, backoff);
        log.warn({ ...context, retryInMs: delayMs }, 'feedback notification failed; will retry');
        await scheduleNotificationRetryElevated(sql, claim, delayMs, message);
      }
      return null;
    }
  }

  /** Sends a claimed batch, `transport.concurrency` at a time, then marks the sent ones at once. */
  async function deliverBatch(claims: ClaimedNotification[]): Promise<void> {
    // Recipients are looked up once per batch, and only if some row needs them.
    let recipients: Promise<string[]> | undefined;
    const lookUpRecipients = () =>
      (recipients ??= config.FEEDBACK_NOTIFY_EMAILS.length > 0 ? Promise.resolve(config.FEEDBACK_NOTIFY_EMAILS) : adminRecipientEmailsElevated(sql));
    const sent: { claim: ClaimedNotification; providerMessageId?: string }[] = [];
    let next = 0;
    const sender = async () => {
      while (next < claims.length) {
        const claim = claims[next++];
        const providerMessageId = await deliver(claim, lookUpRecipients);
        if (providerMessageId !== null) sent.push({ claim, providerMessageId });
      }
    };
    await Promise.all(Array.from({ length: Math.min(transport.concurrency, claims.length) }, sender));
    const marked = await markNotificationsSentElevated(sql, sent);
    for (const { claim } of sent) {
      const context = { outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts, transport: transport.name };
      if (marked.has(claim.id)) log.info(context, 'feedback notification sent');
      else log.warn(context, 'feedback notification sent after its claim ran out');
    }
  }

  /** Sends due rows, batch after batch, until none is due or the worker stops. */
  async function drain(): Promise<void> {
    while (!stopped) {
      const claims = await claimDueNotificationsElevated(sql, randomUUID(), CLAIM_LEASE_MS, CLAIM_BATCH);
      if (claims.length === 0) return;
      await deliverBatch(claims);
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
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running;
    },
  };
}
