import type { FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../config.ts';
import { csvStream, sendCsv } from '../../lib/csv.ts';
import { rolesInWords, WEBSITE_READERS } from '../../lib/roles.ts';
import { callerOf } from '../../plugins/auth.ts';
import { jsonBodyParser } from '../../plugins/json-body.ts';
import { inRateLimitGroup } from '../../plugins/rate-limit.ts';
import { noStore } from '../../plugins/security.ts';
import analyticsBatcherPlugin from './batcher.ts';
import analyticsErasureRoutes from './erasure/routes.ts';
import { createCountryLookup } from './geo.ts';
import { analyticsCallerGuard, analyticsCallerOf } from './guard.ts';
import { createIngestService } from './ingest-service.ts';
import analyticsRetentionPlugin from './retention/worker.ts';
import {
  CsvResponseSchema,
  DailySeriesResponseSchema,
  type DayRange,
  DateRangeQuerySchema,
  IgnoredEventResponseSchema,
  LiveQuerySchema,
  LiveVisitorsResponseSchema,
  RecordedEventResponseSchema,
  RecordEventBodySchema,
  SummaryQuerySchema,
  SummaryResponseSchema,
  WebsiteSummaryParamsSchema,
  WebsiteSummaryQuerySchema,
} from './schemas.ts';
import { createAnalyticsService, DAILY_SERIES_CSV_COLUMNS } from './service.ts';

// /api/analytics (SPEC section 4). Ingestion is public and answers after
// commit (group commit, batcher.ts); reads need a viewer, editor or admin, or
// the website's own API key in X-API-Key.

const INGEST_BODY_LIMIT = 16 * 1024;
const BOT_NOT_RECORDED = 'Not recorded: the user agent is a known bot';

const analyticsRoutes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  // Trackers on other origins send events with navigator.sendBeacon (or a
  // no-cors fetch): a text/plain body is a CORS "simple request", so the
  // event arrives without a preflight and the API keeps its one-origin CORS.
  // This plugin is encapsulated: only the analytics routes read text/plain as
  // JSON (the root refuses it, plugins/json-body.ts).
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('text/plain', { parseAs: 'buffer' }, jsonBodyParser(app));

  await app.register(analyticsBatcherPlugin, { config });
  await app.register(analyticsRetentionPlugin, { config });
  await app.register(analyticsErasureRoutes);
  const ingest = createIngestService({
    batcher: app.analyticsBatcher,
    saltSecret: config.ANALYTICS_SALT_SECRET,
    countryOf: createCountryLookup(config.ANALYTICS_COUNTRY_DB),
  });
  const analytics = createAnalyticsService({ db: app.db });
  const identifyAnalyticsCaller = analyticsCallerGuard(app, analytics.websiteIdOfApiKeyElevated);
  const requireAdmin = app.requireRole('admin');
  // The read answers are a website's figures, as private as other authenticated answers: no cache
  // keeps them (errors included, so the header comes first). Ingestion answers say nothing, and the
  // tracker script (tracker/routes.ts) is public and cached on purpose.
  const reader = [noStore, identifyAnalyticsCaller];

  /** The one summary answer; its two routes differ only in where the website id is written. */
  async function summarize(request: FastifyRequest, { websiteId, startDate, endDate }: DayRange) {
    const summary = await analytics.summary(analyticsCallerOf(request), { websiteId, startDate, endDate });
    return { success: true as const, data: { websiteId, startDate, endDate, ...summary } };
  }

  const tags = ['analytics'];
  const security: Array<Record<string, string[]>> = [{ bearer: [] }, { apiKey: [] }];
  const readers = `${rolesInWords(WEBSITE_READERS)}, or the website's API key`;

  app.post(
    '/',
    {
      ...inRateLimitGroup(app, 'ingest'),
      bodyLimit: INGEST_BODY_LIMIT,
      onRequest: (_request, reply, done) => {
        app.analyticsBatcher.admit(reply);
        done();
      },
      // Tracked sites post here with no-cors beacons; an answer marked same-origin
      // (helmet's default) would still be stored, but logged as blocked in their console.
      onSend: (_request, reply, payload, done) => {
        reply.header('cross-origin-resource-policy', 'cross-origin');
        done(null, payload);
      },
      schema: {
        tags,
        summary: 'Record an analytics event (public); answered after it is committed',
        description:
          'The body is JSON, sent as application/json or as text/plain: navigator.sendBeacon and no-cors fetches send ' +
          'text/plain, which needs no CORS preflight. 202 for an event from a bot, which is not stored.',
        consumes: ['application/json', 'text/plain'],
        body: RecordEventBodySchema,
        response: { 201: RecordedEventResponseSchema.describe('Stored'), 202: IgnoredEventResponseSchema.describe('From a bot: not stored') },
      },
    },
    async function recordEvent(request, reply) {
      const result = await ingest.record(request.body, { ip: request.ip }, request.log);
      // Said in words: a developer trying the route with curl is a bot to isbot, and found nothing stored.
      if (result.kind === 'bot') return reply.status(202).send({ success: true as const, message: BOT_NOT_RECORDED });
      return reply
        .status(201)
        .send({ success: true as const, message: 'Event recorded', data: { id: result.id, timestamp: result.timestamp } });
    },
  );

  app.get(
    '/',
    {
      onRequest: reader,
      schema: { tags, security, summary: `Summary of a website over whole UTC days (${readers})`, querystring: SummaryQuerySchema, response: { 200: SummaryResponseSchema } },
    },
    async function summaryByQuery(request) {
      return summarize(request, request.query);
    },
  );

  app.get(
    '/website/:websiteId',
    {
      onRequest: reader,
      schema: {
        tags,
        security,
        summary: `Summary of one website, same as GET /api/analytics (${readers})`,
        params: WebsiteSummaryParamsSchema,
        querystring: WebsiteSummaryQuerySchema,
        response: { 200: SummaryResponseSchema },
      },
    },
    async function summaryByPath(request) {
      return summarize(request, { ...request.query, websiteId: request.params.websiteId });
    },
  );

  app.get(
    '/realtime',
    {
      onRequest: reader,
      schema: {
        tags,
        security,
        summary: `Visitors active in the last 5 minutes, per website (${rolesInWords(WEBSITE_READERS)}, or a website's API key)`,
        querystring: LiveQuerySchema,
        response: { 200: LiveVisitorsResponseSchema },
      },
    },
    async function activeVisitors(request) {
      return { success: true as const, data: await analytics.activeVisitors(analyticsCallerOf(request), request.query.websiteId) };
    },
  );

  app.get(
    '/date-range',
    {
      onRequest: reader,
      schema: { tags, security, summary: `Daily page views, visitors and sessions, zero days included (${readers})`, querystring: DateRangeQuerySchema, response: { 200: DailySeriesResponseSchema } },
    },
    async function dailySeries(request) {
      const { websiteId, startDate, endDate } = request.query;
      const series = await analytics.dailySeries(analyticsCallerOf(request), { websiteId, startDate, endDate });
      return { success: true as const, data: { websiteId, ...series } };
    },
  );

  app.get(
    '/date-range/export',
    {
      onRequest: [noStore, requireAdmin],
      schema: {
        tags,
        security: [{ bearer: [] }],
        summary: 'Download the daily series as CSV, streamed (admin; same query as /date-range)',
        querystring: DateRangeQuerySchema,
        produces: ['text/csv'],
        response: { 200: CsvResponseSchema },
      },
    },
    async function exportDailySeries(request, reply) {
      const caller = callerOf(request);
      const range = request.query;
      await analytics.checkReadable(caller, range);
      const body = csvStream(
        [...DAILY_SERIES_CSV_COLUMNS],
        (sink) => analytics.exportDailySeries(caller, range, sink),
        (error) => request.log.error({ err: error }, 'daily series export failed after it started'),
      );
      return sendCsv(reply, `analytics-${range.websiteId}-${range.startDate}-${range.endDate}.csv`, body, { stallMs: config.EXPORT_STALL_MS });
    },
  );
};

export default analyticsRoutes;
