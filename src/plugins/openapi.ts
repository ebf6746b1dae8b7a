import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, RouteOptions } from 'fastify';
import fp from 'fastify-plugin';
import { jsonSchemaTransform } from 'fastify-type-provider-zod';
import { contractOf } from '../lib/documented-as.ts';
import { compressDocsAssets } from './docs-assets.ts';
import type { z } from 'zod';

// The OpenAPI document is generated from the same zod schemas that validate
// requests, so it cannot drift from what the routes accept. The one named
// exception is documentedAs: a body the route parses loosely on purpose.

/** One answer of an operation, as the document writes it. */
interface OpenApiResponse {
  description?: string;
  headers?: object;
  content?: object;
}

/** One operation, as far as the additions here read it. */
interface OpenApiOperation {
  security?: Record<string, string[]>[];
  responses?: Record<string, OpenApiResponse>;
}

interface OpenApiDocument {
  components?: { schemas?: Record<string, unknown> };
  paths?: Record<string, Record<string, OpenApiOperation>>;
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

/** The header of a 401 from the Bearer token check (plugins/auth.ts): refresh, or sign in again. */
const WWW_AUTHENTICATE = {
  description:
    'On a 401 of the Bearer token check (RFC 6750), which the body does not tell apart: ' +
    '`Bearer error="invalid_token", error_description="The access token expired"` when POST /api/auth/refresh and a retry will do; ' +
    '`Bearer error="invalid_token"` with another description when the token is refused for good (sign in again); `Bearer` alone when none came',
  schema: { type: 'string' },
} as const;

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

/** What a success means where its route's response schema gives no description of its own. */
const SUCCESS_MEANINGS: Record<string, string> = {
  200: 'Done: `success: true`, with what the summary names',
  201: 'Created: `success: true`, with what was stored',
};

/** What each refusal means, whichever route gives it; the body (ErrorResponse) says which case it is. */
const ERROR_MEANINGS: Record<number, string> = {
  400: 'Invalid request: `Validation failed` with `details` per field, or a message of its own (malformed JSON, a refusal the route names)',
  401: 'No valid credentials: a missing, expired or ended session, or a wrong key',
  403: 'Authenticated, but not allowed this',
  404: 'Not found: the message names what',
  409: 'Conflicts with what is stored: the message says how',
  413: '`Request body too large`',
  415: '`Unsupported content type; send JSON with Content-Type: application/json`',
  429: 'Over a rate limit: `retryAfter` (and Retry-After) say when to ask again',
  503: 'A part the route needs (the database, the auth server, a provider) is unavailable or busy, or the server is shutting down',
};

// The statuses of each operation's refusals, read from its route: a body is
// parsed on every POST, PUT and DELETE (400 malformed, 413, 415), the guards
// answer 401 and 403, and every route but /health draws on a rate-limit
// budget (429) and is refused while the server shuts down (503). The ones a
// route declares itself (the health reports' 503) keep their own schemas.
const BODY = [400, 413, 415];
const ADMIN = [401, 403];
const ROUTE_ERRORS: Record<string, number[]> = {
  'GET /health': [],
  'GET /script.js': [429, 503],
  'POST /api/feedback': [...BODY, 429, 503],
  'POST /api/feedback/submit-feedback': [...BODY, 429, 503],
  'GET /api/feedback/get-feedback': [400, ...ADMIN, 429, 503],
  'GET /api/get-feedback': [400, ...ADMIN, 429, 503],
  'GET /api/feedback/{id}': [400, ...ADMIN, 404, 429, 503],
  'PUT /api/feedback/{id}': [...BODY, ...ADMIN, 404, 429, 503],
  'DELETE /api/feedback/{id}': [...BODY, ...ADMIN, 404, 429, 503],
  'GET /api/feedback/{id}/screenshot': [400, ...ADMIN, 404, 429, 503],
  'GET /api/feedback/export': [400, ...ADMIN, 429, 503],
  'POST /api/auth/signup': [...BODY, 409, 429, 503],
  'POST /api/auth/signin': [...BODY, 401, 403, 429, 503],
  'POST /api/auth/refresh': [...BODY, 401, 429, 503],
  'POST /api/auth/signout': [...BODY, 401, 429, 503],
  'POST /api/auth/reset-password': [...BODY, 404, 429, 503],
  'POST /api/auth/update-password': [...BODY, 429, 503],
  // 404 when the account went in the seconds its session stays cached, and its token still holds.
  'GET /api/auth/me': [401, 404, 429, 503],
  'POST /api/auth/link': [...BODY, 401, 409, 429, 503],
  'GET /api/admin/health': [...ADMIN, 429],
  'GET /api/admin/metrics': [...ADMIN, 429, 503],
  'GET /api/admin/logs': [400, ...ADMIN, 429, 503],
  'POST /api/admin/logs': [...BODY, ...ADMIN, 429, 503],
  'GET /api/admin/users': [400, ...ADMIN, 429, 503],
  'GET /api/users/me': [401, 404, 429, 503],
  'GET /api/users/email/{email}': [400, ...ADMIN, 404, 429, 503],
  'GET /api/users/{id}': [400, ...ADMIN, 404, 429, 503],
  'PUT /api/users/{id}': [...BODY, ...ADMIN, 404, 409, 429, 503],
  'POST /api/users': [...BODY, ...ADMIN, 409, 429, 503],
  'GET /api/userRoles/{userId}': [400, ...ADMIN, 404, 429, 503],
  'POST /api/userRoles/{userId}': [...BODY, ...ADMIN, 404, 409, 429, 503],
  'POST /api/websites': [...BODY, ...ADMIN, 429, 503],
  'GET /api/websites': [400, ...ADMIN, 429, 503],
  'GET /api/websites/api-key': [401, 404, 429, 503],
  'GET /api/websites/api-key/{apiKey}': [404, 429, 503],
  'GET /api/websites/{id}': [400, ...ADMIN, 404, 429, 503],
  'PUT /api/websites/{id}': [...BODY, ...ADMIN, 404, 429, 503],
  'DELETE /api/websites/{id}': [...BODY, ...ADMIN, 404, 429, 503],
  'POST /api/websites/{id}/api-key': [...BODY, ...ADMIN, 404, 429, 503],
  'POST /api/analytics': [...BODY, 404, 429, 503],
  'GET /api/analytics': [400, ...ADMIN, 404, 429, 503],
  'GET /api/analytics/website/{websiteId}': [400, ...ADMIN, 404, 429, 503],
  'GET /api/analytics/realtime': [400, ...ADMIN, 404, 429, 503],
  'GET /api/analytics/date-range': [400, ...ADMIN, 404, 429, 503],
  'GET /api/analytics/date-range/export': [400, ...ADMIN, 404, 429, 503],
};

/**
 * The operations that take no credentials, written `security: []` so that a
 * linter and a generated client know them as public rather than unspecified.
 * Every other operation names its scheme (`security` in its route's schema);
 * tests/openapi-consumer.test.ts fails for one that does neither. The API key
 * in the path of `/api/websites/api-key/{apiKey}` is no scheme of the document.
 */
const PUBLIC_OPERATIONS = new Set([
  ...['GET /health', 'GET /script.js', 'POST /api/feedback', 'POST /api/feedback/submit-feedback', 'POST /api/analytics'],
  ...['signup', 'signin', 'refresh', 'reset-password', 'update-password'].map((route) => `POST /api/auth/${route}`),
  'GET /api/websites/api-key/{apiKey}',
]);

/** The refusals `method path` answers, as listed above; exported for tests/openapi-precision.test.ts. */
export const errorStatusesOf = (method: string, path: string): number[] | undefined => ROUTE_ERRORS[`${method.toUpperCase()} ${path}`];

/**
 * Adds the error body to every operation: each refusal status its route
 * gives (ROUTE_ERRORS), then 4XX for what any URL can meet before a route is
 * reached (a malformed URL or request, a path too long) and 5XX for the
 * unexpected. The routes do not declare them as response schemas: a reply
 * schema would also serialize the error handler's bodies, and drop any field
 * it did not list. An operation missing from ROUTE_ERRORS (one a test or a
 * later change registers) gets the ranges alone, 4XX and 5XX, each with
 * Retry-After, as every operation had before the table: the document is never
 * refused over it, and tests/openapi-precision.test.ts fails for any of the
 * app's own operations missing from it.
 */
function withErrorResponses(document: OpenApiDocument): OpenApiDocument {
  const reference = { $ref: '#/components/schemas/ErrorResponse' };
  const answer = (description: string) => ({ description, content: { 'application/json': { schema: reference } } });
  // Every budget's 429 carries it (plugins/errors.ts), the auth server's passed on too: clients that back off read it.
  // Every 503 carries Retry-After (plugins/errors.ts and the health routes' own).
  const refusal = (status: number, bearer: boolean) => {
    const described = answer(ERROR_MEANINGS[status]);
    if (status === 401 && bearer) return { ...described, headers: { 'WWW-Authenticate': WWW_AUTHENTICATE } };
    if (status === 429) return { ...described, headers: { 'Retry-After': RETRY_AFTER } };
    return status === 503 ? { ...described, headers: { 'Retry-After': RETRY_AFTER_UNAVAILABLE } } : described;
  };
  const withRetryAfterOn503 = (responses: Record<string, OpenApiResponse>) =>
    responses['503'] ? { ...responses, 503: { ...responses['503'], headers: { ...responses['503'].headers, 'Retry-After': RETRY_AFTER_UNAVAILABLE } } } : responses;
  // @fastify/swagger's name for a response whose schema has no description: a success says what it is instead.
  const withSuccessDescribed = (responses: Record<string, OpenApiResponse>) =>
    Object.fromEntries(
      Object.entries(responses).map(([status, response]) =>
        response.description === 'Default Response' && SUCCESS_MEANINGS[status] ? [status, { ...response, description: SUCCESS_MEANINGS[status] }] : [status, response],
      ),
    );
  const otherRefusals = answer('Refused before any route is reached: 400 `Malformed URL`, 414 `URI too long`, and the like');
  const failed = answer('Failed unexpectedly: `requestId` names it');
  const unlisted = {
    '4XX': { ...answer('Refused: the statuses of this operation are not listed'), headers: { 'Retry-After': RETRY_AFTER } },
    '5XX': { ...failed, headers: { 'Retry-After': RETRY_AFTER_UNAVAILABLE } },
  };
  const responsesOf = (method: string, path: string, { responses: declared = {}, security = [] }: OpenApiOperation) => {
    const statuses = errorStatusesOf(method, path);
    if (!statuses) return withRetryAfterOn503({ ...declared, ...unlisted });
    const bearer = security.some((scheme) => 'bearer' in scheme);
    const refusals = Object.fromEntries(statuses.filter((status) => !(status in declared)).map((status) => [status, refusal(status, bearer)]));
    return withRetryAfterOn503({ ...declared, ...refusals, '4XX': otherRefusals, '5XX': failed });
  };
  const documentedOperation = (method: string, path: string, operation: OpenApiOperation) => {
    const isPublic = !operation.security && PUBLIC_OPERATIONS.has(`${method.toUpperCase()} ${path}`);
    return { ...operation, ...(isPublic ? { security: [] } : {}), responses: withSuccessDescribed(responsesOf(method, path, operation)) };
  };
  const paths = Object.fromEntries(
    Object.entries(document.paths ?? {}).map(([path, operations]) => [
      path,
      Object.fromEntries(
        // A path item also holds `parameters`, `summary` and the like: only its operations get answers.
        Object.entries(operations).map(([key, value]) => [key, HTTP_METHODS.has(key) ? documentedOperation(key, path, value) : value]),
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
  // In a scope of its own, so the compressing hook (plugins/docs-assets.ts) sees the explorer's routes alone.
  await pages.register(async function docs(scope) {
    await compressDocsAssets(scope);
    await scope.register(swaggerUi, {
      routePrefix: '/docs',
      staticCSP: true,
      transformStaticCSP: (header) => docsPageCsp(header, { production }),
      uiConfig: { deepLinking: true },
    });
  });
}
