// The answers the OpenAPI document (plugins/openapi.ts) gives each operation
// beyond its route's own schemas: every refusal status the route answers, in
// the SPEC's error envelope with the headers that come with it, what a
// success means, and which operations need no credentials.

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

export interface OpenApiDocument {
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
  422: 'Well-formed but not to be processed: the message says why (an Idempotency-Key reused with a different request)',
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
  // 409 and 422 answer an Idempotency-Key still in progress or reused for another body.
  'POST /api/feedback': [...BODY, 409, 422, 429, 503],
  'POST /api/feedback/submit-feedback': [...BODY, 409, 422, 429, 503],
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
  'POST /api/analytics/websites/{websiteId}/erasures': [...BODY, ...ADMIN, 404, 429, 503],
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
export function withErrorResponses(document: OpenApiDocument): OpenApiDocument {
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
