import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';

// The OpenAPI document is generated from the same zod schemas that validate
// requests, so it cannot drift from what the routes accept.
export default fp<{ version: string }>(
  async function openApiPlugin(app: FastifyInstance, { version }) {
    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: { title: 'Portfolio backend', description: 'JSON API of the portfolio web site.', version },
        components: {
          securitySchemes: {
            bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
            apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
          },
        },
      },
      transform: jsonSchemaTransform,
    });
  },
  { name: 'openapi' },
);

/** The /docs explorer: an HTML page, so app.ts registers it in the pages' scope. */
export async function docsPage(pages: FastifyInstance) {
  await pages.register(swaggerUi, { routePrefix: '/docs', staticCSP: true, uiConfig: { deepLinking: true } });
}
