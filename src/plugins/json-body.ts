import { isAscii, isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { AppError, validationFailed } from '../lib/errors.ts';

// JSON bodies are parsed by Fastify's own parser (which refuses __proto__ and
// constructor poisoning, answered here as a validation error naming the
// field), an empty one counting as no body, then refused when
// they nest deeper than any route needs (validating or serialising a value
// thousands of levels deep exhausts the stack: a 500 from 10 KB of brackets),
// or when any string in them holds what Postgres cannot store: a NUL
// character (in neither text nor jsonb) or an unpaired surrogate (`\ud800`
// escaped in the JSON, which no UTF-8 text can hold; stored, it silently
// became U+FFFD). One such value would otherwise fail a whole batched insert,
// or be answered 201 and stored as something else.
//
// The bytes must be UTF-8, as JSON's RFC 8259 requires: a body in another
// charset, or with bytes that are not UTF-8, was decoded with U+FFFD in place
// of each bad byte and stored that way.

const ESCAPED_NUL = /\\u0000/i;
const ESCAPED_SURROGATE = /\\ud[89a-f]/i;
const BLANK = /^\s*$/;
/** Deepest nesting accepted in a body (the body itself is level 1). */
const MAX_BODY_DEPTH = 32;
const NUL_MESSAGE = 'Must not contain NUL (\\u0000) characters';
const SURROGATE_MESSAGE = 'Must not contain unpaired surrogates (\\ud800-\\udfff)';

/** The top-level field (or `body`) of the first branch nested deeper than MAX_BODY_DEPTH; undefined when none is. */
function tooDeep(body: unknown): string | undefined {
  // Iterative: the point is not to recurse thousands of levels.
  const stack: { value: unknown; depth: number; field: string }[] = [{ value: body, depth: 0, field: 'body' }];
  while (stack.length > 0) {
    const { value, depth, field } = stack.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (depth === MAX_BODY_DEPTH) return field;
    // Only objects and arrays go on the stack: a body is mostly strings and numbers.
    // An array is walked by index: Object.keys would make a string of each one
    // (1.3 s for the 3.6 million items of a 7 MB body).
    const keys = Array.isArray(value) ? undefined : Object.keys(value);
    const count = keys ? keys.length : (value as unknown[]).length;
    for (let i = 0; i < count; i += 1) {
      const item = keys ? (value as Record<string, unknown>)[keys[i]] : (value as unknown[])[i];
      if (item !== null && typeof item === 'object') stack.push({ value: item, depth: depth + 1, field: depth === 0 ? (keys ? keys[i] : String(i)) : field });
    }
  }
  return undefined;
}

/** What is wrong with one string, if anything. */
function unstorable(text: string): string | undefined {
  if (text.includes('\u0000')) return NUL_MESSAGE;
  if (!text.isWellFormed()) return SURROGATE_MESSAGE;
  return undefined;
}

/** Top-level field (or `body`) → message, for strings (values or keys) Postgres cannot store; at most 10. */
function unstorableFields(body: unknown): Map<string, string> {
  const found = new Map<string, string>();
  const visit = (value: unknown, field: string | undefined) => {
    if (found.size >= 10) return;
    if (typeof value === 'string') {
      const problem = unstorable(value);
      if (problem && !found.has(field ?? 'body')) found.set(field ?? 'body', problem);
    } else if (value && typeof value === 'object') {
      for (const [key, item] of Object.entries(value)) {
        const problem = unstorable(key);
        if (problem) found.set(field ?? 'body', problem);
        visit(item, field ?? key);
      }
    }
  };
  visit(body, undefined);
  return found;
}

const POISON_MESSAGE = 'Must not contain the key "__proto__", or "constructor" holding "prototype"';

/**
 * For a body Fastify's parser refused: when the text is well-formed JSON, the
 * top-level field (or `body`) holding the key it refuses, `__proto__` or a
 * `constructor` with a `prototype`. Undefined when the JSON is malformed.
 * (JSON.parse itself makes such keys plain data, so reading them is safe.)
 */
function poisonedField(text: string): string | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  const stack: { value: unknown; field: string | undefined }[] = [{ value, field: undefined }];
  while (stack.length > 0) {
    const { value: item, field } = stack.pop()!;
    if (item === null || typeof item !== 'object') continue;
    for (const [key, child] of Object.entries(item)) {
      const poison = key === '__proto__' || (key === 'constructor' && child !== null && typeof child === 'object' && Object.hasOwn(child, 'prototype'));
      if (poison) return field ?? 'body';
      stack.push({ value: child, field: field ?? key });
    }
  }
  return undefined;
}

/** The `charset` of a Content-Type header, lower case; undefined when it names none. */
function charsetOf(contentType: string | undefined): string | undefined {
  return /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(contentType ?? '')?.[1]?.toLowerCase();
}

type BodyParser = Parameters<FastifyInstance['addContentTypeParser']>[2];

/**
 * Fastify's JSON parser over a UTF-8 body (given as a Buffer), refusing bodies
 * nested too deep or with strings Postgres cannot store (the field named).
 */
export function jsonBodyParser(app: FastifyInstance): BodyParser {
  const parse = app.getDefaultJsonParser('error', 'error');
  return (request, body, done) => {
    // A body in plain ASCII reads the same in UTF-8, whatever charset it is labelled with.
    const charset = charsetOf(request.headers['content-type']);
    if (charset !== undefined && charset !== 'utf-8' && charset !== 'utf8' && (typeof body === 'string' || !isAscii(body))) {
      return done(new AppError(415, 'Unsupported charset; send the body as UTF-8'), undefined);
    }
    if (typeof body !== 'string' && !isUtf8(body)) return done(new AppError(400, 'Request body is not valid UTF-8'), undefined);
    const text = typeof body === 'string' ? body : body.toString('utf8');
    // Clients send `Content-Type: application/json` on a POST without a body
    // (sign out, say): that is no body, not malformed JSON.
    if (BLANK.test(text)) return done(null, undefined);
    parse(request, text, (error: Error | null, value?: unknown) => {
      if (error) {
        // Fastify's parser calls a poisoning key malformed JSON; the client is told which field holds it.
        const poisoned = poisonedField(text);
        return done(poisoned === undefined ? error : validationFailed({ [poisoned]: [POISON_MESSAGE] }), undefined);
      }
      const deep = tooDeep(value);
      if (deep !== undefined) return done(validationFailed({ [deep]: [`Must be nested at most ${MAX_BODY_DEPTH} levels deep`] }), undefined);
      // Either can only come from an escape in the text; most bodies have none.
      if (!ESCAPED_NUL.test(text) && !ESCAPED_SURROGATE.test(text)) return done(null, value);
      const found = unstorableFields(value);
      if (found.size === 0) return done(null, value);
      // Keyed by top-level field, like every other validation detail.
      done(validationFailed(Object.fromEntries([...found].map(([field, message]) => [field, [message]]))), undefined);
    });
  };
}

/** Whether a request's body is sent in a content coding (gzip, br, …): nothing here decodes one. */
function hasEncodedBody(headers: FastifyRequest['headers']): boolean {
  const encoding = headers['content-encoding'];
  if (encoding === undefined || encoding.trim().toLowerCase() === 'identity') return false;
  return headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0');
}

export default fp(
  async function jsonBodyPlugin(app: FastifyInstance) {
    // A gzipped body went on to the parsers as it was, and came back 400 "not valid UTF-8":
    // the client is told what to change instead (RFC 7694: 415 for a coding not supported).
    // A callback hook, as every hook that runs on each request: an async one costs a promise each time.
    app.addHook('onRequest', function refuseEncodedBody(request, _reply, done) {
      if (hasEncodedBody(request.headers)) return done(new AppError(415, 'Unsupported content encoding; send the body uncompressed'));
      done();
    });
    app.addContentTypeParser('application/json', { parseAs: 'buffer' }, jsonBodyParser(app));
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
