import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../config.ts';
import { callerOf } from '../../plugins/auth.ts';
import { jsonBodyParser } from '../../plugins/json-body.ts';
import { inRateLimitGroup } from '../../plugins/rate-limit.ts';
import { noStore } from '../../plugins/security.ts';
import { createCaptchaVerifier } from './captcha.ts';
import { deleteExpiredIdempotencyKeys } from './idempotency.ts';
import {
  DeleteFeedbackResponseSchema,
  FeedbackIdParamsSchema,
  FeedbackItemResponseSchema,
  CsvResponseSchema,
  ExportFeedbackQuerySchema,
  ListFeedbackQuerySchema,
  ListFeedbackResponseSchema,
  ScreenshotResponseSchema,
  SubmitFeedbackBodySchema,
  SubmitFeedbackHeadersSchema,
  SubmitFeedbackResponseSchema,
  UpdateFeedbackBodySchema,
  UpdateFeedbackResponseSchema,
} from './schemas.ts';
import { MAX_SCREENSHOT_CHARS, SCREENSHOT_TYPES } from './screenshot.ts';
import { createScreenshotSlots } from './screenshot-slots.ts';
import { createFeedbackService, FEEDBACK_CSV_COLUMNS } from './service.ts';
import { csvStream, sendCsv } from '../../lib/csv.ts';

// SPEC section 4, feedback routes: public submission (and its legacy path),
// admin list (and its alias), one item, admin triage, and deletion.

/** Room for a 5 MiB screenshot as base64 plus the other fields; the global limit stays small. */
export const SUBMIT_BODY_LIMIT = MAX_SCREENSHOT_CHARS + 256 * 1024;

const feedbackRoutes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  app.addHook('onRequest', noStore);
  const feedback = createFeedbackService({
    db: app.db,
    captcha: createCaptchaVerifier(config),
    onSubmitted: () => app.feedbackOutbox.wake(),
  });
  // A submission's 7 MB body is parsed and stored only in one of a few slots,
  // so a burst of them cannot take the whole pool (screenshot-slots.ts).
  const screenshotSlots = createScreenshotSlots(config.FEEDBACK_SCREENSHOTS_AT_ONCE);
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, screenshotSlots.parser(jsonBodyParser(app)));

  const submit = {
    ...inRateLimitGroup(app, 'feedback'),
    bodyLimit: SUBMIT_BODY_LIMIT,
    onRequest: screenshotSlots.watch,
    onSend: screenshotSlots.release,
    schema: {
      tags: ['feedback'],
      summary: 'Submit feedback (public)',
      description: 'An optional field (location, category, screenshot, websiteId, captchaToken) sent as null or an empty string is taken as not given.',
      headers: SubmitFeedbackHeadersSchema,
      body: SubmitFeedbackBodySchema,
      response: { 201: SubmitFeedbackResponseSchema },
    },
  };
  for (const url of ['/api/feedback', '/api/feedback/submit-feedback']) {
    app.post(url, submit, async function submitFeedback(request, reply) {
      const { status, data, replayed } = await feedback.submitFeedback(request.body, request.ip, request.log, request.headers['idempotency-key']);
      // The draft leaves the replay's marking to the server; this is the name others use.
      if (replayed) reply.header('idempotent-replayed', 'true');
      // 201, the one answer recorded (the insert's trigger): a failed attempt is given back, not replayed.
      return reply.status(status as 201).send({ success: true as const, message: 'Feedback submitted successfully', data });
    });
  }

  // Idempotency keys past their 24 hours are never replayed; deleting them
  // only keeps the table small. Hourly, the first a minute after start (an
  // instance restarted more often than hourly still deletes), off the
  // request path and not holding the process open.
  let closing = false;
  let deleting: Promise<unknown> | undefined;
  const deleteExpiredKeys = () => {
    deleting ??= deleteExpiredIdempotencyKeys(app.db, { stopped: () => closing })
      .catch((error: unknown) => app.log.error({ err: error }, 'deleting expired feedback idempotency keys failed'))
      .finally(() => (deleting = undefined));
  };
  const firstDelete = setTimeout(deleteExpiredKeys, 60_000).unref();
  const deleter = setInterval(deleteExpiredKeys, 60 * 60_000).unref();
  app.addHook('onClose', async () => {
    closing = true;
    clearTimeout(firstDelete);
    clearInterval(deleter);
    await deleting;
  });

  const list = {
    onRequest: app.requireRole('admin'),
    schema: {
      tags: ['feedback'],
      summary: 'List feedback, newest first unless order=asc (admin)',
      security: [{ bearer: [] }],
      querystring: ListFeedbackQuerySchema,
      response: { 200: ListFeedbackResponseSchema },
    },
  };
  for (const url of ['/api/feedback/get-feedback', '/api/get-feedback']) {
    app.get(url, list, async function listFeedback(request) {
      const { data, total } = await feedback.listFeedback(callerOf(request), request.query);
      return { success: true as const, data, pagination: { total, limit: request.query.limit, offset: request.query.offset } };
    });
  }

  // One item, which the admin page the notification e-mail links to reads
  // (${ADMIN_URL}/feedback/<id>, the front end's). Fastify matches the static
  // paths beside it (/export, /get-feedback) before this parameter.
  app.get(
    '/api/feedback/:id',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags: ['feedback'],
        summary: 'One feedback item, as the list shows it (admin)',
        security: [{ bearer: [] }],
        params: FeedbackIdParamsSchema,
        response: { 200: FeedbackItemResponseSchema },
      },
    },
    async function getFeedback(request) {
      const data = await feedback.findFeedback(callerOf(request), request.params.id);
      return { success: true as const, data };
    },
  );

  app.get(
    '/api/feedback/:id/screenshot',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags: ['feedback'],
        summary: 'The screenshot of one feedback item, as the image itself (admin)',
        security: [{ bearer: [] }],
        params: FeedbackIdParamsSchema,
        produces: [...SCREENSHOT_TYPES, 'application/octet-stream'],
        response: { 200: ScreenshotResponseSchema },
      },
    },
    async function sendScreenshot(request, reply) {
      const file = await feedback.findScreenshot(callerOf(request), request.params.id);
      // Uploaded bytes: nothing in them may run, and a type we do not serve as an image is a download.
      reply
        .header('content-security-policy', "default-src 'none'; sandbox")
        .header('cache-control', 'private, no-store')
        .header('content-disposition', file.image ? 'inline' : `attachment; filename="screenshot-${request.params.id}"`);
      return reply.type(file.type).send(file.bytes);
    },
  );

  app.get(
    '/api/feedback/export',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags: ['feedback'],
        summary: 'Download matching feedback as CSV, streamed, newest first unless order=asc (admin)',
        security: [{ bearer: [] }],
        querystring: ExportFeedbackQuerySchema,
        produces: ['text/csv'],
        response: { 200: CsvResponseSchema },
      },
    },
    async function exportFeedback(request, reply) {
      const caller = callerOf(request);
      const body = csvStream(
        FEEDBACK_CSV_COLUMNS.map(([name]) => name),
        (sink) => feedback.exportFeedback(caller, request.query, sink),
        (error) => request.log.error({ err: error }, 'feedback export failed after it started'),
      );
      return sendCsv(reply, `feedback-${new Date().toISOString().slice(0, 10)}.csv`, body, { stallMs: config.EXPORT_STALL_MS });
    },
  );

  app.put(
    '/api/feedback/:id',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags: ['feedback'],
        summary: 'Change the status or notes of feedback (admin)',
        security: [{ bearer: [] }],
        params: FeedbackIdParamsSchema,
        body: UpdateFeedbackBodySchema,
        response: { 200: UpdateFeedbackResponseSchema },
      },
    },
    async function triageFeedback(request) {
      const data = await feedback.triageFeedback(callerOf(request), request.params.id, request.body);
      return { success: true as const, message: 'Feedback updated successfully', data };
    },
  );

  // Not in the SPEC: how an admin carries out a sender's erasure request
  // (docs/feedback.md, "Erasure requests").
  app.delete(
    '/api/feedback/:id',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags: ['feedback'],
        summary: 'Delete feedback, its screenshot and its pending notification (admin)',
        security: [{ bearer: [] }],
        params: FeedbackIdParamsSchema,
        response: { 200: DeleteFeedbackResponseSchema },
      },
    },
    async function deleteFeedback(request) {
      const data = await feedback.deleteFeedback(callerOf(request), request.params.id, request.log);
      return { success: true as const, message: 'Feedback deleted successfully', data };
    },
  );
};

export default feedbackRoutes;
