import { isAscii, isUtf8 } from 'node:buffer';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { AppError, UNSUPPORTED_CONTENT_TYPE, validationFailed } from '../lib/errors.ts';

// JSON bodies are parsed by Fastify's own parser (which refuses __proto__ and
// constructor poisoning, answered here as a validation error naming the
// field), an empty one counting as no body. Before parsing, the text is read
// for a shape no route needs: nested deeper than 32 levels (validating or
// serialising a value thousands of levels deep exhausts the stack: a 500 from
// 10 KB of brackets) or more than 20,000 values (see refusedShape). After it,
// bodies are refused when any string in them holds what Postgres cannot
// store: a NUL character (in neither text nor jsonb) or an unpaired surrogate
// (`\ud800` escaped in the JSON, which no UTF-8 text can hold; stored, it
// silently became U+FFFD). One such value would otherwise fail a whole
// batched insert, or be answered 201 and stored as something else.
//
// The bytes must be UTF-8, as JSON's RFC 8259 requires: a body in another
// charset, or with bytes that are not UTF-8, was decoded with U+FFFD in place
// of each bad byte and stored that way.

const ESCAPED_NUL = /\\u0000/i;
const ESCAPED_SURROGATE = /\\ud[89a-f]/i;
const BLANK = /^\s*$/;
const NUL_MESSAGE = 'Must not contain NUL (\\u0000) characters';
const SURROGATE_MESSAGE = 'Must not contain unpaired surrogates (\\ud800-\\udfff)';

const SPACE = 0x20;
const TAB = 0x09;
const LINE_FEED = 0x0a;
const CARRIAGE_RETURN = 0x0d;
const QUOTE = 0x22; // "
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const COMMA = 0x2c;
const OPEN_BRACKET = 0x5b; // [
const OPEN_BRACE = 0x7b; // {
const CLOSE_BRACKET = 0x5d;
const CLOSE_BRACE = 0x7d;

const STRUCTURAL = new Uint8Array(CLOSE_BRACE + 1);
for (const code of [QUOTE, COLON, COMMA, OPEN_BRACKET, OPEN_BRACE, CLOSE_BRACKET, CLOSE_BRACE]) STRUCTURAL[code] = 1;

/**
 * Where the string opened by the quote at `at` ends (its closing quote), or -1.
 * The next quote ends it unless a backslash stands right before it; only then
 * is the string read from its first backslash on, one character at a time,
 * each backslash taking the character after it. Jumping from quote to quote
 * instead, and counting the backslashes before each, cost 22 ns a quote in a
 * string of escaped quotes: 78 ms for 7 MB, twice the parse (14 ms now).
 */
function closingQuote(text: string, at: number): number {
  const end = text.indexOf('"', at + 1);
  if (end === -1 || text.charCodeAt(end - 1) !== BACKSLASH) return end;
  for (let next = text.indexOf('\\', at + 1); next < text.length; next += 1) {
    const code = text.charCodeAt(next);
    if (code === BACKSLASH) next += 1;
    else if (code === QUOTE) return next;
  }
  return -1;
}

// Runs of characters the pass has nothing to do with (blanks; digits and the
// letters of true, false and null) are skipped by a regular expression, which
// reads them faster than a loop over charCodeAt: 7 MB of blanks or of one
// number's digits cost the pass 10 and 0.5 ms so, against 25 and 54 ms.
const NEXT_NOT_BLANK = /[^ \t\n\r]/g;
const NEXT_STRUCTURAL = /["\[\]{},:]/g;

/** Where `pattern` next matches in `text` at or after `from`; the text's length when nowhere. */
function nextMatch(pattern: RegExp, text: string, from: number): number {
  pattern.lastIndex = from;
  return pattern.test(text) ? pattern.lastIndex - 1 : text.length;
}

/** Limits on a body's shape, checked on its text before it is parsed. */
export interface ShapeLimits {
  /** Deepest nesting; the body itself is level 1. */
  depth: number;
  /** Most values: the body, and each member and element in it, at any depth. */
  values: number;
}

const BODY_SHAPE_LIMITS: ShapeLimits = { depth: 32, values: 20_000 };

/**
 * Why a body's shape is refused, read from its text before it is parsed:
 * nested deeper than `limits.depth` (the top-level field of the first branch
 * that is, or `body`), or holding more than `limits.values` values (`body`).
 * Undefined when neither, or when the text ends inside a string (the parser
 * refuses that).
 *
 * Read from the text because the parser builds whatever it is given before
 * anything can refuse it. A feedback body may be 7 MB (for its screenshot):
 * 7 MB of nested brackets held the process about half a second to build 3.5
 * million arrays before their 400, and 7 MB of empty objects or of distinct
 * keys, a quarter to half a second, accepted. No route's own limits let a
 * body hold twenty thousand values (16 KiB of `[0,0,…]`, the most a
 * website's settings, its metadata or an analytics event may be, is about
 * 8,000; a website takes both), so the limit only refuses bodies made to
 * cost time. This pass jumps from quote to quote through strings, so a
 * screenshot costs it well under a millisecond; it stops at the first limit
 * passed.
 */
export function refusedShape(text: string, limits: ShapeLimits = BODY_SHAPE_LIMITS): { field: string; message: string } | undefined {
  let depth = 0;
  let values = 1; // the body itself
  let opened = false; // the last character read opened an object or array
  let topIsArray = false;
  let index = 0; // of the top-level array's current item
  let keyStart = -1; // the top-level object's current key, quotes included
  let keyEnd = -1;
  let stringStart = -1; // the last string read (a key, when a colon follows it)
  let stringEnd = -1;
  for (let at = 0; at < text.length; at += 1) {
    const code = text.charCodeAt(at);
    if (code === SPACE || code === TAB || code === LINE_FEED || code === CARRIAGE_RETURN) {
      at = nextMatch(NEXT_NOT_BLANK, text, at + 1) - 1;
      continue;
    }
    // An object or array holds one value more than it has commas, unless it is empty.
    if (opened) {
      opened = false;
      if (code !== CLOSE_BRACKET && code !== CLOSE_BRACE && ++values > limits.values) return tooManyValues(limits);
    }
    // Digits and the letters of true, false and null: nothing to count up to the next structural character.
    if (code > CLOSE_BRACE || !STRUCTURAL[code]) {
      at = nextMatch(NEXT_STRUCTURAL, text, at + 1) - 1;
      continue;
    }
    if (code === QUOTE) {
      const end = closingQuote(text, at);
      if (end === -1) return undefined;
      stringStart = at;
      stringEnd = end;
      at = end;
    } else if (code === OPEN_BRACKET || code === OPEN_BRACE) {
      depth += 1;
      opened = true;
      if (depth === 1) topIsArray = code === OPEN_BRACKET;
      if (depth > limits.depth) {
        return { field: topIsArray ? String(index) : keyName(text, keyStart, keyEnd), message: `Must be nested at most ${limits.depth} levels deep` };
      }
    } else if (code === CLOSE_BRACKET || code === CLOSE_BRACE) {
      depth -= 1;
    } else if (code === COMMA) {
      if (++values > limits.values) return tooManyValues(limits);
      if (depth === 1) index += 1;
    } else if (depth === 1 && code === COLON) {
      keyStart = stringStart;
      keyEnd = stringEnd;
    }
  }
  return undefined;
}

/** The refusal of a body holding more values than `limits.values`. */
function tooManyValues(limits: ShapeLimits) {
  return { field: 'body', message: `Must hold at most ${limits.values} values (the body, and each member and element in it)` };
}

/** The key quoted at text[start..end]; `body` when there is none or it is not valid JSON. */
function keyName(text: string, start: number, end: number): string {
  if (start < 0) return 'body';
  try {
    return JSON.parse(text.slice(start, end + 1)) as string;
  } catch {
    return 'body';
  }
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
    const refused = refusedShape(text);
    if (refused !== undefined) return done(validationFailed({ [refused.field]: [refused.message] }), undefined);
    parse(request, text, (error: Error | null, value?: unknown) => {
      if (error) {
        // Fastify's parser calls a poisoning key malformed JSON; the client is told which field holds it.
        const poisoned = poisonedField(text);
        return done(poisoned === undefined ? error : validationFailed({ [poisoned]: [POISON_MESSAGE] }), undefined);
      }
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
      done(BLANK.test(text) ? null : new AppError(415, UNSUPPORTED_CONTENT_TYPE), undefined);
    });
  },
  { name: 'json-body' },
);
