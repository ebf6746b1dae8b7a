import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../../config.ts';
import { shutdownBudget } from '../../../lib/shutdown-budget.ts';
import { countNotificationSendFailure } from '../../../plugins/metrics.ts';
import { createMailTransport, type MailTransport } from './mail-transport.ts';
import { countOwedNotificationsElevated } from './queries.ts';
import { createWorker, FAILING_AFTER_ATTEMPTS } from './worker.ts';

// The outbox as the app sees it (`app.feedbackOutbox`): the mail provider,
// a wake-up call for new submissions, and the backlog for admin health. This
// instance runs the worker (worker.ts) when it has a transport and is allowed to.

export interface FeedbackOutbox {
  /** The configured mail provider (Resend or SMTP), whether or not this instance runs the worker. */
  readonly provider: MailTransport['name'] | null;
  /** Which transport this instance sends with, or null when it sends nothing and rows wait. */
  readonly transport: MailTransport['name'] | null;
  /** Looks for due rows now instead of at the next poll. */
  wake(): void;
  /** Notifications owed by every instance, and how many keep failing. */
  backlog(): Promise<{ owed: number; failing: number }>;
}

declare module 'fastify' {
  interface FastifyInstance {
    feedbackOutbox: FeedbackOutbox;
  }
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
    const provider = transport?.name ?? null;
    const backlog = async () => (await app.db.bounded(countOwedNotificationsElevated(app.db.sql, FAILING_AFTER_ATTEMPTS)))[0];
    if (!transport || !outboxWorkerEnabled(config)) {
      transport?.close();
      app.decorate('feedbackOutbox', { provider, transport: null, wake() {}, backlog });
      app.addHook('onReady', async () =>
        transport
          ? log.info('feedback outbox worker off in this instance (FEEDBACK_OUTBOX_WORKER)')
          : log.warn('no e-mail transport (RESEND_API_KEY or SMTP_URL): feedback notifications wait in the outbox'),
      );
      return;
    }
    const worker = createWorker(app.db.sql, config, transport, log, { onSendFailure: () => countNotificationSendFailure(app, transport.name) });
    app.decorate('feedbackOutbox', { provider, transport: transport.name, wake: worker.wake, backlog });
    app.addHook('onReady', async () => worker.start());
    // The sends in flight get the drain's share of the shutdown (lib/shutdown-budget.ts), beside
    // the analytics batcher's drain rather than before it: the stop begins at preClose, and is
    // awaited in onClose, which runs before the database pool closes.
    let stopping: Promise<void> = Promise.resolve();
    app.addHook('preClose', async () => {
      stopping = worker.stop(shutdownBudget(config.SHUTDOWN_TIMEOUT_MS).drainMs);
    });
    app.addHook('onClose', async () => {
      await stopping;
      transport.close();
    });
  },
  { name: 'feedback-outbox', dependencies: ['db'] },
);
