import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { AppError, validationFailed } from '../lib/errors.ts';

// JSON bodies are parsed by Fastify's own parser (which refuses __proto__ and
// constructor poisoning), an empty one counting as no body, then refused when
// they nest deeper than any route needs (validating or serialising a value
// thousands of levels deep exhausts the stack: a 500 from 10 KB of brackets),
// or when any string in them holds a NUL character: Postgres can store NUL in
// neither text nor jsonb, and one such value would otherwise fail a whole
// batched insert.

const ESCAPED_NUL = /\\u0000/i;
const BLANK = /^\s*$/;
/** Deepest nesting accepted in a body (the body itself is level 1). */
const MAX_BODY_DEPTH = 32;

/** The top-level field (or `body`) of the first branch nested deeper than MAX_BODY_DEPTH; undefined when none is. */
function tooDeep(body: unknown): string | undefined {
  // Iterative: the point is not to recurse thousands of levels.
  const stack: { value: unknown; depth: number; field: string }[] = [{ value: body, depth: 0, field: 'body' }];
  while (stack.length > 0) {
    const { value, depth, field } = stack.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (depth === MAX_BODY_DEPTH) return field;
    for (const [key, item] of Object.entries(value)) stack.push({ value: item, depth: depth + 1, field: depth === 0 ? key : field });
  }
  return undefined;
}

function nulPaths(value: unknown, path: string, found: string[]): void {
  if (found.length >= 10) return;
  if (typeof value === 'string') {
    if (value.includes('\u0000')) found.push(path || 'body');
  } else if (Array.isArray(value)) {
    value.forEach((item, index) => nulPaths(item, path ? `${path}.${index}` : String(index), found));
  } else if (value && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      if (key.includes('\u0000')) found.push(path ? `${path}.${key.replaceAll('\u0000', '')}` : 'body');
      nulPaths(item, path ? `${path}.${key}` : key, found);
    }
  }
}

type BodyParser = Parameters<FastifyInstance['addContentTypeParser']>[2];

/** Fastify's JSON parser, refusing bodies nested too deep or with a NUL in any string (with the field named). */
export function jsonBodyParser(app: FastifyInstance): BodyParser {
  const parse = app.getDefaultJsonParser('error', 'error');
  return (request, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    // Clients send `Content-Type: application/json` on a POST without a body
    // (sign out, say): that is no body, not malformed JSON.
    if (BLANK.test(text)) return done(null, undefined);
    parse(request, text, (error: Error | null, value?: unknown) => {
      if (error) return done(error, undefined);
      const deep = tooDeep(value);
      if (deep !== undefined) return done(validationFailed({ [deep]: [`Must be nested at most ${MAX_BODY_DEPTH} levels deep`] }), undefined);
      if (!ESCAPED_NUL.test(text)) return done(null, value);
      const found: string[] = [];
      nulPaths(value, '', found);
      if (found.length === 0) return done(null, value);
      // Keyed by top-level field, like every other validation detail.
      const fields = new Set(found.map((path) => path.split('.')[0]));
      done(validationFailed(Object.fromEntries([...fields].map((field) => [field, ['Must not contain NUL (\\u0000) characters']]))), undefined);
    });
  };
}

export default fp(
  async function jsonBodyPlugin(app: FastifyInstance) {
    app.addContentTypeParser('application/json', { parseAs: 'string' }, jsonBodyParser(app));
    // Fastify reads text/plain as a string, which a JSON route then refuses as
    // "expected object": text in it is 415 instead, as for any other type
    // (fetch sends text/plain when a front end forgets the header). An empty
    // body is no body, whatever its type (`fetch(url, {method: 'POST', body: ''})`
    // to sign out). Ingestion reads text/plain as JSON (analytics/routes.ts).
    app.removeContentTypeParser('text/plain');
    app.addContentTypeParser('text/plain', { parseAs: 'string' }, function refuseText(_request, body, done) {
      const text = typeof body === 'string' ? body : body.toString('utf8');
      done(BLANK.test(text) ? null : new AppError(415, 'Unsupported content type'), undefined);
    });
  },
  { name: 'json-body' },
);
