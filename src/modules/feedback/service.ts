import { randomUUID } from 'node:crypto';
import escapeHtml from 'escape-html';
import type { FastifyBaseLogger } from 'fastify';
import { badRequest, conflict, constraintOf, forbidden, fromPostgresError, notFound, serviceUnavailable, validationFailed } from '../../lib/errors.ts';
import { clientNetworkOf } from '../../lib/client-network.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database, DbActor } from '../../plugins/db.ts';
import type { CaptchaVerifier } from './captcha.ts';
import { claimOrReplay, IDEMPOTENCY_KEY_IN_PROGRESS, type IdempotencyClaim, isClaimLost, releaseClaim, requestFingerprint, scopedIdempotencyKey } from './idempotency.ts';
import type { CsvSink } from '../../lib/csv.ts';
import {
  callerMayReadFeedback,
  countFeedback,
  type ExportPosition,
  feedbackById,
  feedbackExportChunk,
  feedbackScreenshot,
  insertFeedback,
  listFeedback,
  nameIdempotencyClaim,
} from './queries.ts';
import { deleteFeedbackRow, updateFeedbackTriage } from './triage-queries.ts';
import { screenshotFile } from './screenshot.ts';
import { unescapeStoredText } from './stored-text.ts';
import type { ExportFeedbackQuery, Feedback, ListFeedbackQuery, SubmitFeedbackBody, UpdateFeedbackBody } from './schemas.ts';

// Feedback operations. Submissions run as `anon` under row-level security;
// admin operations run as their caller's database actor. All text is HTML-escaped with
// escape-html before it is stored (SPEC section 2).

/**
 * A submission has no caller: it runs as the public (anon), with the claim
 * the insert policy asks for, which the Data API's callers cannot present
 * (supabase/migrations/20261127000100_submit_feedback_through_the_api.sql).
 */
const SUBMITTER: DbActor = { role: 'anon', claims: { role: 'anon', submitted_via: 'api' } };
/**
 * At most so many rows, and so many bytes of their text, per statement of
 * the export: each chunk is held in memory until the client has taken it.
 * Ordinary feedback fills 500 rows long before 1 MiB; rows of the longest
 * text the table allows (some 100 kB each) fill the bytes with a few.
 */
export const EXPORT_CHUNK_ROWS = 500;
export const EXPORT_CHUNK_TEXT_BYTES = 1024 * 1024;

type ExportRow = Awaited<ReturnType<typeof feedbackExportChunk>>['rows'][number];
/**
 * Stored text as typed: a spreadsheet shows `&lt;` as it is. Formulas that
 * come back with the unescaping are still defused: csvCell sees this value.
 */
const plain = (value: string | null) => (value === null ? null : unescapeStoredText(value));
/** The export's columns, in order: header and how each is read from a row. */
export const FEEDBACK_CSV_COLUMNS: Array<[string, (row: ExportRow) => unknown]> = [
  ['id', (row) => row.id],
  ['createdAt', (row) => row.created_at],
  ['updatedAt', (row) => row.updated_at],
  ['status', (row) => row.status],
  ['rating', (row) => row.rating],
  ['category', (row) => plain(row.category)],
  ['name', (row) => plain(row.name)],
  ['email', (row) => plain(row.email)],
  ['comment', (row) => plain(row.comment)],
  ['location', (row) => plain(row.location)],
  ['websiteId', (row) => row.website_id],
  ['adminNotes', (row) => plain(row.admin_notes)],
  ['resolvedBy', (row) => plain(row.resolved_by)],
  ['resolvedAt', (row) => row.resolved_at],
];

const escapeOptional = (value: string | undefined) => (value === undefined ? null : escapeHtml(value));

/** The list's and the export's filters; the address HTML-escaped, as submitted addresses are stored. */
const filterOf = (query: ExportFeedbackQuery) => ({
  status: query.status,
  websiteId: query.websiteId,
  email: query.email === undefined ? undefined : escapeHtml(query.email),
});

/** The data of a submission's answer, the first time and on a replay. */
export interface SubmittedFeedback {
  id: string;
  status: 'pending';
}

export interface FeedbackServiceDeps {
  db: Database;
  captcha: CaptchaVerifier;
  /** Called after a submission committed (wakes the notification worker). */
  onSubmitted?: () => void;
  /** Rows and bytes of text per statement of the export (EXPORT_CHUNK_ROWS, EXPORT_CHUNK_TEXT_BYTES); tests set them small. */
  exportChunkRows?: number;
  exportChunkTextBytes?: number;
}

export function createFeedbackService({
  db,
  captcha,
  onSubmitted,
  exportChunkRows = EXPORT_CHUNK_ROWS,
  exportChunkTextBytes = EXPORT_CHUNK_TEXT_BYTES,
}: FeedbackServiceDeps) {
  /** The bot check, then the row (and, under a claim, its answer) in one transaction. */
  async function storeFeedback(body: SubmitFeedbackBody, remoteIp: string, log: FastifyBaseLogger | undefined, claim: IdempotencyClaim | undefined) {
    const verdict = await captcha.verify(body.captchaToken, remoteIp, log);
    if (verdict === 'failed') throw badRequest('Bot verification failed');
    if (verdict === 'unavailable') throw serviceUnavailable('Bot verification unavailable');

    const id = randomUUID();
    try {
      await db.writeAtOnceAsActor(SUBMITTER, async (tx) => {
        // Issued first: the chain runs its statements in the order they were started.
        const named = claim && nameIdempotencyClaim(tx, claim);
        named?.execute().catch(() => {});
        await insertFeedback(tx, {
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
        });
        await named;
      });
    } catch (error) {
      if (fromPostgresError(error)?.statusCode === 400 && constraintOf(error) === 'feedback_website_id_fkey') {
        throw validationFailed({ websiteId: ['Website not found'] });
      }
      if (isClaimLost(error)) throw conflict(IDEMPOTENCY_KEY_IN_PROGRESS);
      throw error;
    }
    onSubmitted?.();
    return { id, status: 'pending' as const };
  }

  return {
    /**
     * Stores a submission; `log` (the request's) hears why a bot check could
     * not be made. With an Idempotency-Key (idempotency.ts), a retry of the
     * same request from the same client gets the first answer again
     * (`replayed`), before the bot check, whose one-use token the retry sends
     * again: no second row, no second e-mail.
     */
    async submitFeedback(
      body: SubmitFeedbackBody,
      remoteIp: string,
      log?: FastifyBaseLogger,
      idempotencyKey?: string,
    ): Promise<{ status: number; data: SubmittedFeedback; replayed: boolean }> {
      let claim: IdempotencyClaim | undefined;
      if (idempotencyKey !== undefined) {
        const scopedKey = scopedIdempotencyKey(clientNetworkOf(remoteIp), idempotencyKey);
        const outcome = await claimOrReplay<SubmittedFeedback>(db, scopedKey, requestFingerprint(body, ['captchaToken']));
        if (outcome.kind === 'replay') return { status: outcome.status, data: outcome.data, replayed: true };
        claim = outcome.claim;
      }
      try {
        const data = await storeFeedback(body, remoteIp, log, claim);
        return { status: 201, data, replayed: false };
      } catch (error) {
        if (claim) await releaseClaim(db, claim, log);
        throw error;
      }
    },

    async listFeedback(caller: Caller, query: ListFeedbackQuery): Promise<{ data: Feedback[]; total: number }> {
      const filter = filterOf(query);
      // Unfiltered, the page's generic plan walks the creation index whatever
      // the page, the plan wanted. Filtered, the best plan can hang on the
      // value (a status no row has, where the statistics see one status in
      // every row), so PostgreSQL plans those pages for their values.
      const genericPlans = filter.status === undefined && filter.websiteId === undefined && filter.email === undefined;
      return db.readAtOnceAsActor(
        dbActorOf(caller),
        async (tx) => {
          const [total, data] = await Promise.all([countFeedback(tx, filter), listFeedback(tx, filter, query)]);
          return { data, total };
        },
        { genericPlans },
      );
    },

    /** One feedback item, as a list row; 404 when it is not visible (the message PUT answers for an unknown id). */
    async findFeedback(caller: Caller, id: string): Promise<Feedback> {
      const item = await db.readAtOnceAsActor(dbActorOf(caller), (tx) => feedbackById(tx, id));
      if (!item) throw notFound('Feedback not found');
      return item;
    },

    /** One screenshot as bytes to serve; 404 when the feedback is not visible or has none. */
    async findScreenshot(caller: Caller, id: string) {
      const dataUrl = await db.readAtOnceAsActor(dbActorOf(caller), (tx) => feedbackScreenshot(tx, id));
      if (!dataUrl) throw notFound('Screenshot not found');
      return screenshotFile(dataUrl);
    },

    /**
     * Writes every matching row into `sink`, read in keyset chunks: each the
     * next rows after the last one written, by (created_at, id): unique, and
     * never updated (the callers' roles may not). One statement for the whole
     * export (a cursor) ran under one statement timeout however large the
     * table or slow the client; a chunk is a short statement of its own, and
     * the next is read only once the client has taken the last.
     *
     * Each chunk is a transaction of its own, as the caller's actor, so
     * row-level security decides on every one. One transaction for all would
     * not give one snapshot (under READ COMMITTED each statement takes its
     * own), and REPEATABLE READ would hold a snapshot, a pooled connection
     * and vacuum back for as long as the slowest client reads. So a row that
     * matches throughout is written once, in order; one inserted, changed or
     * deleted during the export is read as the chunk that reaches it finds it.
     */
    async exportFeedback(caller: Caller, query: ExportFeedbackQuery, sink: CsvSink): Promise<void> {
      const actor = dbActorOf(caller);
      const filter = filterOf(query);
      let after: ExportPosition | undefined;
      for (;;) {
        const chunk = { order: query.order, after, limit: exportChunkRows, maxTextBytes: exportChunkTextBytes };
        const { rows, nothingAfter } = await db.readAtOnceAsActor(actor, (tx) => feedbackExportChunk(tx, filter, chunk));
        for (const row of rows) {
          const open = await sink.write(FEEDBACK_CSV_COLUMNS.map(([, read]) => read(row)));
          if (!open) return;
        }
        if (nothingAfter) {
          // Past the last row, or past every row row-level security still shows the caller: an
          // admin whose role went during the export would get a file that stops early and looks
          // whole. Cut instead, as any failure midway is.
          if (!(await db.readAtOnceAsActor(actor, callerMayReadFeedback))) throw forbidden('The caller may no longer read feedback; the export was cut');
          return;
        }
        const lastRow = rows[rows.length - 1];
        after = { createdAt: lastRow.created_at_text, id: lastRow.id };
      }
    },

    /**
     * Resolving without naming anyone records the caller as the resolver. The
     * caller's admin role is asked again by the write itself, as it may have
     * been revoked since the guard read it: 403 then, as for any non-admin,
     * not 404 for a row row-level security now hides.
     */
    async triageFeedback(caller: Caller, id: string, body: UpdateFeedbackBody) {
      try {
        const { callerIsAdmin, updated } = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) =>
          updateFeedbackTriage(tx, id, {
            status: body.status,
            adminNotes: typeof body.adminNotes === 'string' ? escapeHtml(body.adminNotes) : body.adminNotes,
            resolvedBy: escapeOptional(body.resolvedBy) ?? undefined,
            resolvedByDefault: escapeHtml(caller.userId),
          }),
        );
        if (!callerIsAdmin) throw forbidden();
        if (!updated) throw notFound('Feedback not found');
        return updated;
      } catch (error) {
        if (constraintOf(error) === 'feedback_resolution_matches_status') {
          throw validationFailed({ resolvedBy: ['resolvedBy can only be set on resolved or archived feedback'] });
        }
        throw error;
      }
    },

    /**
     * Deletes one item, screenshot and pending notification with it, for an
     * erasure request. The role is asked again by the statement, as triage
     * does: 403 for an admin revoked since the guard, not 404. The log names
     * who deleted which id, never what the item said.
     */
    async deleteFeedback(caller: Caller, id: string, log: FastifyBaseLogger): Promise<{ id: string }> {
      const { callerIsAdmin, deleted } = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) => deleteFeedbackRow(tx, id));
      if (!callerIsAdmin) throw forbidden();
      if (!deleted) throw notFound('Feedback not found');
      // Named as role changes name their maker: the legacy token's userId is no account's.
      const deletedBy = caller.kind === 'legacy-admin' ? `legacy-admin:${caller.userId}` : caller.userId;
      log.info({ feedbackId: id, deletedBy }, 'feedback deleted');
      return { id };
    },
  };
}

export type FeedbackService = ReturnType<typeof createFeedbackService>;
