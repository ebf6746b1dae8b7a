import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { unauthorized } from '../../lib/errors.ts';
import { MessageResponseSchema, PaginationQuerySchema } from '../../lib/schemas.ts';
import { actorFor } from '../../plugins/auth.ts';
import { WEBSITE_DELETERS, WEBSITE_READERS, WEBSITE_WRITERS } from './permissions.ts';
import {
  ApiKeyHeadersSchema,
  ApiKeyParamsSchema,
  CreatedWebsiteResponseSchema,
  CreateWebsiteBodySchema,
  ListWebsitesResponseSchema,
  UpdateWebsiteBodySchema,
  WebsiteIdParamsSchema,
  WebsiteResponseSchema,
} from './schemas.ts';
import { createWebsitesService, websiteNotFound } from './service.ts';

// Websites (issue 5): registered under /api/websites. Readers are viewers,
// editors and admins; editors and admins write; only admins delete.

const websitesRoutes: FastifyPluginAsyncZod = async (app) => {
  const websites = createWebsitesService({ db: app.db });
  const tags = ['websites'];
  const security = [{ bearer: [] }];

  app.post(
    '/',
    {
      onRequest: app.requireRole(...WEBSITE_WRITERS),
      schema: { tags, security, summary: 'Create a website and its API key', body: CreateWebsiteBodySchema, response: { 201: CreatedWebsiteResponseSchema } },
    },
    async (request, reply) => {
      const data = await websites.create(actorFor(request.caller), request.body);
      return reply.status(201).send({ success: true as const, message: 'Website created; store the API key now, it is not shown again', data });
    },
  );

  app.get(
    '/',
    {
      onRequest: app.requireRole(...WEBSITE_READERS),
      schema: { tags, security, summary: 'List websites, newest first', querystring: PaginationQuerySchema, response: { 200: ListWebsitesResponseSchema } },
    },
    async (request) => {
      const { data, total } = await websites.list(actorFor(request.caller), request.query);
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
    async (request) => {
      const apiKey = request.headers['x-api-key'];
      if (!apiKey) throw unauthorized();
      const website = await websites.findByApiKeyElevated(apiKey);
      if (!website) throw websiteNotFound();
      return { success: true as const, data: website };
    },
  );

  // Public: the key in the path is the credential (general rate limit applies);
  // log lines show the path with the key redacted (lib/redact.ts).
  app.get(
    '/api-key/:apiKey',
    {
      schema: { tags, summary: 'The website an API key belongs to (without the key)', params: ApiKeyParamsSchema, response: { 200: WebsiteResponseSchema } },
    },
    async (request) => {
      const website = await websites.findByApiKeyElevated(request.params.apiKey);
      if (!website) throw websiteNotFound();
      return { success: true as const, data: website };
    },
  );

  app.get(
    '/:id',
    {
      onRequest: app.requireRole(...WEBSITE_READERS),
      schema: { tags, security, summary: 'One website', params: WebsiteIdParamsSchema, response: { 200: WebsiteResponseSchema } },
    },
    async (request) => ({ success: true as const, data: await websites.get(actorFor(request.caller), request.params.id) }),
  );

  app.put(
    '/:id',
    {
      onRequest: app.requireRole(...WEBSITE_WRITERS),
      schema: { tags, security, summary: 'Update a website', params: WebsiteIdParamsSchema, body: UpdateWebsiteBodySchema, response: { 200: WebsiteResponseSchema } },
    },
    async (request) => ({
      success: true as const,
      data: await websites.update(actorFor(request.caller), request.params.id, request.body),
    }),
  );

  app.delete(
    '/:id',
    {
      onRequest: app.requireRole(...WEBSITE_DELETERS),
      schema: { tags, security, summary: 'Delete a website with its analytics', params: WebsiteIdParamsSchema, response: { 200: MessageResponseSchema } },
    },
    async (request) => {
      await websites.remove(actorFor(request.caller), request.params.id);
      return { success: true as const, message: 'Website deleted' };
    },
  );
};

export default websitesRoutes;
