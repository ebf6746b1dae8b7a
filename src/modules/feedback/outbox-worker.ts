import { createHash, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../config.ts';
import type { Sql } from '../../plugins/db.ts';
import { retryDelayMs } from './backoff.ts';
import { createMailTransport, DeliveryError, type MailTransport, SEND_TIMEOUT_MS } from './mail-transport.ts';
import { adminUrl, renderFeedbackNotification } from './notification.ts';
import {
  adminRecipientEmails,
  type ClaimedNotification,
  claimDueNotification,
  feedbackForNotification,
  giveUpNotification,
  markNotificationSent,
  scheduleNotificationRetry,
} from './outbox-queries.ts';

// The worker that empties the feedback outbox (docs/feedback.md): started
// when the app is ready, stopped before it closes. It claims one due row at
// a time, sends it, and marks it sent; a failure is retried with exponential
// backoff until FEEDBACK_OUTBOX_MAX_ATTEMPTS, then the row is kept as given up.

/** How long a claim holds a row: well beyond one send's timeout. */
export const CLAIM_LEASE_MS = 6 * SEND_TIMEOUT_MS;

export interface FeedbackOutbox {
  /** Which transport this instance sends with, or null when it sends nothing and rows wait. */
  readonly transport: MailTransport['name'] | null;
  /** Looks for due rows now instead of at the next poll. */
  wake(): void;
}

declare module 'fastify' {
  interface FastifyInstance {
    feedbackOutbox: FeedbackOutbox;
  }
}

/** Stable per message: a retry of the same e-mail carries the same key, a changed e-mail a new one. */
export function idempotencyKeyFor(outboxId: string, content: unknown): string {
  const digest = createHash('sha256').update(JSON.stringify(content)).digest('hex').slice(0, 16);
  return `feedback-notification-${outboxId}-${digest}`;
}

function createWorker(sql: Sql, config: Config, transport: MailTransport, log: FastifyBaseLogger) {
  const base = adminUrl(config);
  const backoff = { baseMs: config.FEEDBACK_OUTBOX_RETRY_BASE_MS, maxMs: config.FEEDBACK_OUTBOX_RETRY_MAX_MS };
  let timer: NodeJS.Timeout | undefined;
  let running: Promise<void> | undefined;
  let wakeRequested = false;
  let stopped = false;

  async function deliver(claim: ClaimedNotification): Promise<void> {
    try {
      const feedback = await feedbackForNotification(sql, claim.feedbackId);
      if (!feedback) throw new DeliveryError('feedback row not found', true);
      const to = config.FEEDBACK_NOTIFY_EMAILS.length > 0 ? config.FEEDBACK_NOTIFY_EMAILS : await adminRecipientEmails(sql);
      if (to.length === 0) throw new DeliveryError('no recipients: FEEDBACK_NOTIFY_EMAILS is empty and no user has the admin role', false);
      const mail = { from: config.EMAIL_FROM, to, ...renderFeedbackNotification(feedback, base) };
      const { providerMessageId } = await transport.send(mail, idempotencyKeyFor(claim.id, mail));
      if (await markNotificationSent(sql, claim, providerMessageId)) {
        log.info({ outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts, transport: transport.name }, 'feedback notification sent');
      } else {
        log.warn({ outboxId: claim.id }, 'feedback notification sent after its claim ran out');
      }
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      const permanent = error instanceof DeliveryError && error.permanent;
      const context = { outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts, error: message };
      if (permanent || claim.attempts >= config.FEEDBACK_OUTBOX_MAX_ATTEMPTS) {
        log.error(context, 'feedback notification given up');
        await giveUpNotification(sql, claim, message);
      } else {
        const delayMs = retryDelayMs(claim.attempts, backoff);
        log.warn({ ...context, retryInMs: delayMs }, 'feedback notification failed; will retry');
        await scheduleNotificationRetry(sql, claim, delayMs, message);
      }
    }
  }

  /** Sends due rows one by one until none is due or the worker stops. */
  async function drain(): Promise<void> {
    while (!stopped) {
      const claim = await claimDueNotification(sql, randomUUID(), CLAIM_LEASE_MS);
      if (!claim) return;
      await deliver(claim);
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

/**
 * Whether this instance runs the worker: FEEDBACK_OUTBOX_WORKER, else on
 * outside tests. Test apps share one database, so only the tests of the
 * worker itself turn it on; an API-only instance may turn it off.
 */
export function outboxWorkerEnabled(config: Config): boolean {
  return config.FEEDBACK_OUTBOX_WORKER ?? config.NODE_ENV !== 'test';
}

export default fp<{ config: Config }>(
  async function feedbackOutboxPlugin(app: FastifyInstance, { config }) {
    const log = app.log.child({ module: 'feedback-outbox' });
    const transport = createMailTransport(config);
    if (!transport || !outboxWorkerEnabled(config)) {
      app.decorate('feedbackOutbox', { transport: null, wake() {} });
      app.addHook('onReady', async () =>
        transport
          ? log.info('feedback outbox worker off in this instance (FEEDBACK_OUTBOX_WORKER)')
          : log.warn('no e-mail transport (RESEND_API_KEY or SMTP_URL): feedback notifications wait in the outbox'),
      );
      return;
    }
    const worker = createWorker(app.db.sql, config, transport, log);
    app.decorate('feedbackOutbox', { transport: transport.name, wake: worker.wake });
    app.addHook('onReady', async () => worker.start());
    // Before onClose, where the database pool closes: the pass in flight ends first.
    app.addHook('preClose', async () => {
      await worker.stop();
      transport.close();
    });
  },
  { name: 'feedback-outbox', dependencies: ['db'] },
);
