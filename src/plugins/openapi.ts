import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { contractOf } from '../lib/documented-as.ts';
import { compressDocs } from './docs-assets.ts';
import { type OpenApiDocument, withErrorResponses } from './openapi-responses.ts';
import type { z } from 'zod';

// The OpenAPI document is generated from the same zod schemas that validate
// requests, so it cannot drift from what the routes accept. The one named
// exception is documentedAs: a body the route parses loosely on purpose.

/**
 * The URL a route is documented under. A route written as '/' under a prefix
 * is registered by Fastify with and without the trailing slash, as one route
 * (one options object, its URL left as the slash form): it is documented in
 * the SPEC's form, `/api/analytics`. No other route can hold that URL and
 * method, as Fastify refuses a duplicate.
 */
function documentedUrl(route: RouteOptions & { routePath?: string }): string {
  const { url } = route;
  const alsoWithoutSlash = route.routePath === '/' && route.prefixTrailingSlash !== 'slash';
  return alsoWithoutSlash && url.length > 1 && url.endsWith('/') ? url.slice(0, -1) : url;
}

/**
 * The operation's name for client generators, which otherwise make one up:
 * its method and path without `/api`, a path parameter as `By` and its name
 * (`GET /api/feedback/:id/screenshot` is `getFeedbackByIdScreenshot`).
 * Distinct for the app's routes (tests/openapi.test.ts checks it), though not
 * for every pair of paths: `/a-b` and `/aB` would meet.
 */
function operationIdOf(method: string, url: string): string {
  const words = url
    .replace(/^\/api(?=\/|$)/, '')
    .split('/')
    .filter(Boolean)
    .flatMap((segment) => {
      // Fastify's form of a path parameter (`:id`); the document's `{id}` comes after.
      const parameter = /^:(\w+)$/.exec(segment);
      return parameter ? ['by', parameter[1]] : segment.split(/[-_.]/);
    });
  return [method.toLowerCase(), ...words.map((word) => word.charAt(0).toUpperCase() + word.slice(1))].join('');
}

/** zod schemas to JSON Schema (fastify-type-provider-zod), with documented contracts, URLs and operation ids. */
const transform: typeof jsonSchemaTransform = (input) => {
  const body = input.schema?.body as z.ZodType | undefined;
  const contract = body && contractOf(body);
  const transformed = jsonSchemaTransform(contract ? { ...input, schema: { ...input.schema, body: contract } } : input);
  const url = documentedUrl(input.route);
  // One method a route here: @fastify/swagger would give every method of a route this one id.
  const method = [input.route.method].flat()[0];
  const operationId = (transformed.schema as { operationId?: string } | undefined)?.operationId ?? operationIdOf(method, url);
  return { ...transformed, schema: { ...transformed.schema, operationId }, url };
};

export default fp<{ version: string }>(
  async function openApiPlugin(app: FastifyInstance, { version }) {
    await app.register(swagger, {
      openapi: {
        openapi: '3.1.0',
        info: { title: 'Portfolio backend', description: 'JSON API of the portfolio web site.', version },
        // The configuration names no public address of the API (FRONTEND_URL, ADMIN_URL and
        // SUPABASE_URL are other servers'), so the server is relative: OpenAPI 3 reads `/` against
        // the URL the document was fetched from, and Swagger UI's "Try it out" calls the host that
        // served /docs/json. A missing `servers` means the same, but generators that take a base
        // URL from it (openapi-generator's clients) fall back to http://localhost without one. A
        // path-relative `..` would follow the API below a path prefix too, but such generators
        // paste it in as it is. openapi-typescript writes types only (openapi-fetch takes baseUrl).
        servers: [{ url: '/', description: 'The host that serves this document' }],
        components: {
          securitySchemes: {
            bearer: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' },
            apiKey: { type: 'apiKey', in: 'header', name: 'X-API-Key' },
          },
        },
      },
      transform,
      transformObject: (document) => withErrorResponses(('openapiObject' in document ? document.openapiObject : document.swaggerObject) as OpenApiDocument) as never,
    });
  },
  { name: 'openapi' },
);

/**
 * The one inline <style> the explorer writes: the top bar's logo, an SVG that
 * React (swagger-ui-standalone-preset.js, `logo_small`) renders with
 * `<style>.logo_small_svg__cls-2{fill:#fff}.logo_small_svg__cls-3{fill:#85ea2d}</style>`
 * before @fastify/swagger-ui puts its own logo in its place. The page's CSP
 * (`style-src 'self' https:`) refused it: a console error on every visit,
 * and the logo drawn black on the dark bar meanwhile. Allowed by its hash
 * alone, so the policy stays without 'unsafe-inline'. This is the SHA-256 of
 * that text; tests/openapi.test.ts finds the text in the installed bundle and
 * fails when an upgrade changes it, and tests/docs-page-browser.test.ts opens
 * the page in Chromium.
 */
export const LOGO_STYLE_HASH = "'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='";

/** The plugin's CSP for the explorer, with the logo's style allowed and, off production, no HTTPS upgrades. */
function docsPageCsp(header: string, { production }: { production: boolean }): string {
  const withLogoStyle = header.replace(/style-src([^;]*)/, (_directive, sources: string) => `style-src ${sources.trim()} ${LOGO_STYLE_HASH}`);
  // As on the other pages (plugins/security.ts), HTTPS upgrades are asked for in production
  // only: over plain HTTP at any address but localhost the explorer's scripts went to https://.
  return production ? withLogoStyle : withLogoStyle.replace(/\s*upgrade-insecure-requests;?/, '');
}

/** The /docs explorer: an HTML page, so app.ts registers it in the pages' scope. */
export async function docsPage(pages: FastifyInstance, { production }: { production: boolean }) {
  // In a scope of its own, so the compressing hooks (plugins/docs-assets.ts) see the explorer's routes alone.
  await pages.register(async function docs(scope) {
    await compressDocs(scope);
    await scope.register(swaggerUi, {
      routePrefix: '/docs',
      staticCSP: true,
      transformStaticCSP: (header) => docsPageCsp(header, { production }),
      uiConfig: { deepLinking: true },
    });
  });
}
