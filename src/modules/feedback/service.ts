import { randomUUID } from 'node:crypto';
import escapeHtml from 'escape-html';
import { badRequest, fromPostgresError, notFound, serviceUnavailable, validationFailed } from '../../lib/errors.ts';
import type { Database, DbActor } from '../../plugins/db.ts';
import type { CaptchaVerifier } from './captcha.ts';
import { countFeedback, feedbackScreenshot, insertFeedback, listFeedback, updateFeedbackTriage } from './queries.ts';
import { screenshotFile } from './screenshot.ts';
import type { Feedback, ListFeedbackQuery, SubmitFeedbackBody, UpdateFeedbackBody } from './schemas.ts';

// Feedback operations. Submissions run as `anon` under row-level security;
// admin operations run as their caller. All text is HTML-escaped with
// escape-html before it is stored (SPEC section 2).

const SUBMITTER: DbActor = { role: 'anon' };

const escapeOptional = (value: string | undefined) => (value === undefined ? null : escapeHtml(value));

/** The Postgres error's constraint name, for the errors whose meaning depends on it. */
function constraintOf(error: unknown): string | undefined {
  const name = (error as { constraint_name?: unknown } | null)?.constraint_name;
  return typeof name === 'string' ? name : undefined;
}

export interface FeedbackServiceDeps {
  db: Database;
  captcha: CaptchaVerifier;
  /** Called after a submission committed (wakes the notification worker). */
  onSubmitted?: () => void;
}

export function createFeedbackService({ db, captcha, onSubmitted }: FeedbackServiceDeps) {
  return {
    async submit(body: SubmitFeedbackBody, remoteIp: string): Promise<{ id: string; status: 'pending' }> {
      const verdict = await captcha.verify(body.captchaToken, remoteIp);
      if (verdict === 'failed') throw badRequest('Bot verification failed');
      if (verdict === 'unavailable') throw serviceUnavailable('Bot verification unavailable');

      const id = randomUUID();
      try {
        await db.asActor(SUBMITTER, (tx) =>
          insertFeedback(tx, {
            id,
            name: escapeHtml(body.name),
            email: escapeHtml(body.email),
            comment: escapeHtml(body.comment),
            rating: body.rating,
            location: escapeOptional(body.location),
            category: escapeOptional(body.category),
            // Validated to the base64 alphabet: nothing in it to escape.
            screenshot: body.screenshot ?? null,
            websiteId: body.websiteId ?? null,
          }),
        );
      } catch (error) {
        if (fromPostgresError(error)?.statusCode === 400 && constraintOf(error) === 'feedback_website_id_fkey') {
          throw validationFailed({ websiteId: ['Website not found'] });
        }
        throw error;
      }
      onSubmitted?.();
      return { id, status: 'pending' };
    },

    async list(actor: DbActor, query: ListFeedbackQuery): Promise<{ data: Feedback[]; total: number }> {
      const filter = { status: query.status, websiteId: query.websiteId };
      return db.asActor(actor, async (tx) => {
        const [total, data] = await Promise.all([countFeedback(tx, filter), listFeedback(tx, filter, query)]);
        return { data, total };
      });
    },

    /** One screenshot as bytes to serve; 404 when the feedback is not visible or has none. */
    async screenshot(actor: DbActor, id: string) {
      const dataUrl = await db.asActor(actor, (tx) => feedbackScreenshot(tx, id));
      if (!dataUrl) throw notFound('Screenshot not found');
      return screenshotFile(dataUrl);
    },

    async update(actor: DbActor, id: string, body: UpdateFeedbackBody, actingAdmin: string) {
      try {
        const updated = await db.asActor(actor, (tx) =>
          updateFeedbackTriage(tx, id, {
            status: body.status,
            adminNotes: body.adminNotes === undefined ? undefined : escapeHtml(body.adminNotes),
            resolvedBy: escapeOptional(body.resolvedBy) ?? undefined,
            actingAdmin: escapeHtml(actingAdmin),
          }),
        );
        if (!updated) throw notFound('Feedback not found');
        return updated;
      } catch (error) {
        if (constraintOf(error) === 'feedback_resolution_matches_status') {
          throw validationFailed({ resolvedBy: ['resolvedBy can only be set on resolved or archived feedback'] });
        }
        throw error;
      }
    },
  };
}

export type FeedbackService = ReturnType<typeof createFeedbackService>;
