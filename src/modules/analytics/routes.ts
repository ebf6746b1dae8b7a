import { randomBytes } from 'node:crypto';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../config.ts';
import { unauthorized } from '../../lib/errors.ts';
import { jsonBodyParser } from '../../plugins/json-body.ts';
import { inRateLimitGroup } from '../../plugins/rate-limit.ts';
import { WEBSITE_READERS } from '../websites/permissions.ts';
import { createWebsitesService } from '../websites/service.ts';
import analyticsBatcherPlugin from './batcher.ts';
import analyticsRetentionPlugin from './retention/worker.ts';
import { createCountryLookup } from './geo.ts';
import type { AnalyticsReader } from './permissions.ts';
import {
  CsvResponseSchema,
  DailySeriesResponseSchema,
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
import { createIngestService, createLiveService, createSummaryService, DAILY_SERIES_CSV_COLUMNS } from './service.ts';
import { csvStream, sendCsv } from '../../lib/csv.ts';

// Analytics routes (SPEC section 4, issue 5), under /api/analytics. Ingestion is public and answers
// after commit (group commit, batcher.ts); queries need a viewer, editor or
// admin, or the website's own API key in X-API-Key.

const INGEST_BODY_LIMIT = 16 * 1024;

declare module 'fastify' {
  interface FastifyRequest {
    analyticsReader: AnalyticsReader | null;
  }
}

const analyticsRoutes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  // Production refuses to start without the secret (config-production.ts); in
  // development and tests visitor ids hold for this process only.
  const saltSecret = config.ANALYTICS_SALT_SECRET ?? randomBytes(32).toString('hex');

  // Trackers on other origins send events with navigator.sendBeacon (or a
  // no-cors fetch): a text/plain body is a CORS "simple request", so the
  // event arrives without a preflight and the API keeps its one-origin CORS.
  // This plugin is encapsulated: only the analytics routes read text/plain as JSON.
  app.removeContentTypeParser('text/plain');
  app.addContentTypeParser('text/plain', { parseAs: 'string' }, jsonBodyParser(app));

  await app.register(analyticsBatcherPlugin, { config });
  await app.register(analyticsRetentionPlugin, { config });
  const ingest = createIngestService({
    batcher: app.analyticsBatcher,
    saltSecret,
    countryOf: createCountryLookup(config.ANALYTICS_COUNTRY_DB),
  });
  const summaries = createSummaryService({ db: app.db });
  const live = createLiveService({ db: app.db });
  const websites = createWebsitesService({ db: app.db });
  const requireReaderRole = app.requireRole(...WEBSITE_READERS);
  const requireAdmin = app.requireRole('admin');

  app.decorateRequest('analyticsReader', null);

  /** X-API-Key when given (must be a website's key), otherwise a Bearer token with a reader role. */
  async function identifyReader(request: FastifyRequest, reply: FastifyReply) {
    const apiKey = request.headers['x-api-key'];
    if (apiKey !== undefined) {
      const website = typeof apiKey === 'string' ? await websites.findByApiKeyElevated(apiKey) : undefined;
      if (!website) throw unauthorized();
      request.analyticsReader = { kind: 'api-key', websiteId: website.id };
      return;
    }
    await requireReaderRole.call(app, request, reply, () => {});
    if (request.caller) request.analyticsReader = { kind: 'caller', caller: request.caller };
  }

  const readerOf = (request: FastifyRequest): AnalyticsReader => {
    if (!request.analyticsReader) throw unauthorized();
    return request.analyticsReader;
  };

  const tags = ['analytics'];
  const security: Array<Record<string, string[]>> = [{ bearer: [] }, { apiKey: [] }];

  app.post(
    '/',
    {
      ...inRateLimitGroup(app, 'ingest'),
      bodyLimit: INGEST_BODY_LIMIT,
      onRequest: async (request) => app.analyticsBatcher.admit(request),
      onResponse: async (request) => app.analyticsBatcher.release(request),
      onRequestAbort: async (request) => app.analyticsBatcher.release(request),
      // Tracked sites post here with no-cors beacons; an answer marked same-origin
      // (helmet's default) would still be stored, but logged as blocked in their console.
      onSend: async (_request, reply) => void reply.header('cross-origin-resource-policy', 'cross-origin'),
      schema: {
        tags,
        summary: 'Record an analytics event (public); answered after it is committed',
        body: RecordEventBodySchema,
        response: { 201: RecordedEventResponseSchema, 202: IgnoredEventResponseSchema },
      },
    },
    async (request, reply) => {
      const result = await ingest.record(request.body, { ip: request.ip });
      if (result.kind === 'bot') return reply.status(202).send({ success: true as const });
      return reply
        .status(201)
        .send({ success: true as const, message: 'Event recorded', data: { id: result.id, timestamp: result.timestamp } });
    },
  );

  app.get(
    '/',
    {
      onRequest: identifyReader,
      schema: { tags, security, summary: 'Summary of a website over whole UTC days', querystring: SummaryQuerySchema, response: { 200: SummaryResponseSchema } },
    },
    async (request) => {
      const { websiteId, startDate, endDate } = request.query;
      const summary = await summaries.summary(readerOf(request), { websiteId, startDate, endDate });
      return { success: true as const, data: { websiteId, startDate, endDate, ...summary } };
    },
  );

  app.get(
    '/website/:websiteId',
    {
      onRequest: identifyReader,
      schema: {
        tags,
        security,
        summary: 'Summary of one website (same as GET /api/analytics)',
        params: WebsiteSummaryParamsSchema,
        querystring: WebsiteSummaryQuerySchema,
        response: { 200: SummaryResponseSchema },
      },
    },
    async (request) => {
      const { websiteId } = request.params;
      const { startDate, endDate } = request.query;
      const summary = await summaries.summary(readerOf(request), { websiteId, startDate, endDate });
      return { success: true as const, data: { websiteId, startDate, endDate, ...summary } };
    },
  );

  app.get(
    '/realtime',
    {
      onRequest: identifyReader,
      schema: {
        tags,
        security,
        summary: 'Visitors active in the last 5 minutes, per website',
        querystring: LiveQuerySchema,
        response: { 200: LiveVisitorsResponseSchema },
      },
    },
    async (request) => ({ success: true as const, data: await live.activeVisitors(readerOf(request), request.query.websiteId) }),
  );

  app.get(
    '/date-range',
    {
      onRequest: identifyReader,
      schema: { tags, security, summary: 'Daily page views, visitors and sessions, zero days included', querystring: DateRangeQuerySchema, response: { 200: DailySeriesResponseSchema } },
    },
    async (request) => {
      const { websiteId, startDate, endDate } = request.query;
      const series = await summaries.dailySeries(readerOf(request), { websiteId, startDate, endDate });
      return { success: true as const, data: { websiteId, ...series } };
    },
  );

  app.get(
    '/date-range/export',
    {
      onRequest: requireAdmin,
      schema: {
        tags,
        security: [{ bearer: [] }],
        summary: 'Download the daily series as CSV, streamed (admin; same query as /date-range)',
        querystring: DateRangeQuerySchema,
        produces: ['text/csv'],
        response: { 200: CsvResponseSchema },
      },
    },
    async (request, reply) => {
      if (!request.caller) throw unauthorized();
      const reader: AnalyticsReader = { kind: 'caller', caller: request.caller };
      const range = request.query;
      await summaries.checkReadable(reader, range);
      const body = csvStream(
        [...DAILY_SERIES_CSV_COLUMNS],
        (sink) => summaries.exportDailySeries(reader, range, sink),
        (error) => request.log.error({ err: error }, 'daily series export failed after it started'),
      );
      return sendCsv(reply, `analytics-${range.websiteId}-${range.startDate}-${range.endDate}.csv`, body);
    },
  );
};

export default analyticsRoutes;
