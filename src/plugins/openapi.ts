import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { contractOf } from '../lib/documented-as.ts';
import type { z } from 'zod';

// The OpenAPI document is generated from the same zod schemas that validate
// requests, so it cannot drift from what the routes accept. The one named
// exception is documentedAs: a body the route parses loosely on purpose.

interface OpenApiDocument {
  components?: { schemas?: Record<string, unknown> };
  paths?: Record<string, Record<string, { responses?: Record<string, unknown> }>>;
}

/** Every failure's body (SPEC section 7, plugins/errors.ts): one schema, for generated clients. */
const ERROR_RESPONSE = {
  type: 'object',
  required: ['success', 'error', 'statusCode'],
  properties: {
    success: { const: false },
    error: { type: 'string', description: 'What went wrong, for people' },
    statusCode: { type: 'integer' },
    details: {
      type: 'object',
      additionalProperties: { type: 'array', items: { type: 'string' } },
      description:
        'Messages per field, on a 400 about fields: always on `Validation failed` (the schema checks of body, query, ' +
        "path and headers, and the JSON parser's), and on a few other 400s about one field, such as update-password's " +
        '`Password must be at least 6 characters` under `newPassword`. A field inside another is written with dots ' +
        '(`roles.1`); `body` (or `querystring`) holds what concerns the whole body or query rather than one field (a ' +
        'body that is not an object, or a rule across fields such as `Give a name or an email to change`).',
    },
    retryAfter: { type: 'integer', description: 'On 429: seconds until the budget resets (also the Retry-After header)' },
    requestId: { type: 'string', description: 'On 5xx: the id to quote when reporting it' },
  },
} as const;

/** The header of every 429, beside `retryAfter` in its body. */
const RETRY_AFTER = { description: 'On 429: seconds until the budget resets (the same as `retryAfter`)', schema: { type: 'integer', minimum: 1 } } as const;

/** The header of every 503: when to ask again. */
const RETRY_AFTER_UNAVAILABLE = { description: 'On 503: seconds to wait before asking again', schema: { type: 'integer', minimum: 1 } } as const;

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

const HTTP_METHODS = new Set(['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace']);

/**
 * Adds the error body to every operation as its 4XX and 5XX answers. The
 * routes do not declare them as response schemas: a reply schema would also
 * serialize the error handler's bodies, and drop any field it did not list.
 */
function withErrorResponses(document: OpenApiDocument): OpenApiDocument {
  const reference = { $ref: '#/components/schemas/ErrorResponse' };
  const answer = (description: string) => ({ description, content: { 'application/json': { schema: reference } } });
  // Every budget's 429 carries it (plugins/errors.ts), the auth server's passed on too: clients that back off read it.
  const refused = { ...answer('Refused: the body says why'), headers: { 'Retry-After': RETRY_AFTER } };
  // Every 503 carries Retry-After (plugins/errors.ts and the health routes' own).
  const failed = { ...answer('Failed or unavailable'), headers: { 'Retry-After': RETRY_AFTER_UNAVAILABLE } };
  const withRetryAfterOn503 = (responses: Record<string, { headers?: object }>) =>
    responses['503'] ? { ...responses, 503: { ...responses['503'], headers: { ...responses['503'].headers, 'Retry-After': RETRY_AFTER_UNAVAILABLE } } } : responses;
  const paths = Object.fromEntries(
    Object.entries(document.paths ?? {}).map(([path, operations]) => [
      path,
      Object.fromEntries(
        // A path item also holds `parameters`, `summary` and the like: only its operations get answers.
        Object.entries(operations).map(([key, value]) => [
          key,
          HTTP_METHODS.has(key) ? { ...value, responses: withRetryAfterOn503({ ...value.responses, '4XX': refused, '5XX': failed }) } : value,
        ]),
      ),
    ]),
  );
  return { ...document, components: { ...document.components, schemas: { ...document.components?.schemas, ErrorResponse: ERROR_RESPONSE } }, paths };
}
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
  await pages.register(swaggerUi, {
    routePrefix: '/docs',
    staticCSP: true,
    transformStaticCSP: (header) => docsPageCsp(header, { production }),
    uiConfig: { deepLinking: true },
  });
}
