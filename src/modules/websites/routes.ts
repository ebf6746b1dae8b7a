import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../config.ts';
import { credentialsRefused } from '../../lib/errors.ts';
import { MessageResponseSchema, PaginationQuerySchema } from '../../lib/schemas.ts';
import { rolesInWords, WEBSITE_DELETERS, WEBSITE_READERS, WEBSITE_WRITERS } from '../../lib/roles.ts';
import { callerOf } from '../../plugins/auth.ts';
import { noStore } from '../../plugins/security.ts';
import {
  ApiKeyHeadersSchema,
  ApiKeyParamsSchema,
  CreatedWebsiteResponseSchema,
  CreateWebsiteBodySchema,
  DeletionUnderWayResponseSchema,
  ListWebsitesResponseSchema,
  UpdateWebsiteBodySchema,
  WebsiteIdParamsSchema,
  WebsiteResponseSchema,
} from './schemas.ts';
import websiteDeletionPlugin from './deletion/worker.ts';
import { createWebsitesService } from './service.ts';

// /api/websites: readers are viewers, editors and admins; editors and admins
// write; only admins delete. The API key routes are public: the key is the credential.

const websitesRoutes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  // Answers name a caller's websites, or carry an API key (created, replaced); a lookup by key
  // has the key in its URL and no Authorization header, which a cache set to keep everything
  // would store under that URL. No cache may keep any of them (plugins/security.ts).
  app.addHook('onRequest', noStore);
  const websites = createWebsitesService({ db: app.db, deleteBatchSize: config.WEBSITE_DELETE_BATCH, log: app.log });
  // Stops the deletions this service runs at shutdown, and sweeps up those left unfinished.
  await app.register(websiteDeletionPlugin, { config, websites });
  const tags = ['websites'];
  const security = [{ bearer: [] }];
  const readers = `(${rolesInWords(WEBSITE_READERS)})`;
  const writers = `(${rolesInWords(WEBSITE_WRITERS)})`;
  const deleters = `(${rolesInWords(WEBSITE_DELETERS)})`;

  app.post(
    '/',
    {
      onRequest: app.requireRole(...WEBSITE_WRITERS),
      schema: { tags, security, summary: `Create a website and its API key ${writers}`, body: CreateWebsiteBodySchema, response: { 201: CreatedWebsiteResponseSchema } },
    },
    async function createWebsite(request, reply) {
      const data = await websites.createWebsite(callerOf(request), request.body);
      return reply.status(201).send({ success: true as const, message: 'Website created; store the API key now, it is not shown again', data });
    },
  );

  app.get(
    '/',
    {
      onRequest: app.requireRole(...WEBSITE_READERS),
      schema: { tags, security, summary: `List websites, newest first ${readers}`, querystring: PaginationQuerySchema, response: { 200: ListWebsitesResponseSchema } },
    },
    async function listWebsites(request) {
      const { data, total } = await websites.listWebsites(callerOf(request), request.query);
      return { success: true as const, data, pagination: { total, limit: request.query.limit, offset: request.query.offset } };
    },
  );

  // Public: the key in the X-API-Key header is the credential (general rate limit applies).
  app.get(
    '/api-key',
    {
      schema: {
        tags,
        summary: 'The website an API key (X-API-Key) belongs to (without the key)',
        headers: ApiKeyHeadersSchema,
        security: [{ apiKey: [] }],
        response: { 200: WebsiteResponseSchema },
      },
    },
    async function findWebsiteByApiKeyHeader(request) {
      const apiKey = request.headers['x-api-key'];
      if (!apiKey) throw credentialsRefused('no X-API-Key');
      return { success: true as const, data: await websites.findWebsiteByApiKeyElevated(apiKey) };
    },
  );

  // Public: the key in the path is the credential (general rate limit applies);
  // log lines show the path with the key redacted (lib/redact.ts).
  app.get(
    '/api-key/:apiKey',
    {
      schema: { tags, summary: 'The website an API key belongs to (without the key)', params: ApiKeyParamsSchema, response: { 200: WebsiteResponseSchema } },
    },
    async function findWebsiteByApiKeyPath(request) {
      return { success: true as const, data: await websites.findWebsiteByApiKeyElevated(request.params.apiKey) };
    },
  );

  app.get(
    '/:id',
    {
      onRequest: app.requireRole(...WEBSITE_READERS),
      schema: { tags, security, summary: `One website ${readers}`, params: WebsiteIdParamsSchema, response: { 200: WebsiteResponseSchema } },
    },
    async function findWebsite(request) {
      return { success: true as const, data: await websites.findWebsite(callerOf(request), request.params.id) };
    },
  );

  app.put(
    '/:id',
    {
      onRequest: app.requireRole(...WEBSITE_WRITERS),
      schema: { tags, security, summary: `Update a website ${writers}`, params: WebsiteIdParamsSchema, body: UpdateWebsiteBodySchema, response: { 200: WebsiteResponseSchema } },
    },
    async function changeWebsite(request) {
      return { success: true as const, data: await websites.changeWebsite(callerOf(request), request.params.id, request.body) };
    },
  );

  app.post(
    '/:id/api-key',
    {
      onRequest: app.requireRole(...WEBSITE_WRITERS),
      schema: {
        tags,
        security,
        summary: `Replace the API key of a website, the old key stops working at once ${writers}`,
        params: WebsiteIdParamsSchema,
        response: { 200: CreatedWebsiteResponseSchema },
      },
    },
    async function rotateApiKey(request) {
      const data = await websites.rotateApiKey(callerOf(request), request.params.id);
      return { success: true as const, message: 'API key replaced; store the new API key now, it is not shown again', data };
    },
  );

  // The website is marked (hidden, keyless) before the answer in either case; its rows go in
  // batches that the request waits for at most WEBSITE_DELETE_WAIT_MS (docs/analytics.md).
  app.delete(
    '/:id',
    {
      onRequest: app.requireRole(...WEBSITE_DELETERS),
      schema: {
        tags,
        security,
        summary: `Delete a website with its analytics, its API key stops working at once ${deleters}`,
        description:
          '200 once the website and its analytics are gone. 202 when that takes longer than the server waits (WEBSITE_DELETE_WAIT_MS): ' +
          'the website is already gone from every read and its key opens nothing; the rest is deleted in the background.',
        params: WebsiteIdParamsSchema,
        response: { 200: MessageResponseSchema.describe('Deleted, its analytics with it'), 202: DeletionUnderWayResponseSchema.describe('Deletion goes on after the answer') },
      },
    },
    async function removeWebsite(request, reply) {
      const { id } = request.params;
      const outcome = await websites.removeWebsite(callerOf(request), id, { waitMs: config.WEBSITE_DELETE_WAIT_MS });
      if (outcome === 'deleted') return reply.send({ success: true as const, message: 'Website deleted' });
      return reply.status(202).send({ success: true as const, message: 'Website deletion under way', data: { id } });
    },
  );
};

export default websitesRoutes;
