import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import { validationFailed } from '../lib/errors.ts';

// JSON bodies are parsed by Fastify's own parser (which refuses __proto__ and
// constructor poisoning), an empty one counting as no body, then refused when any string in them holds a NUL
// character: Postgres can store NUL in neither text nor jsonb, and one such
// value would otherwise fail a whole batched insert.

const ESCAPED_NUL = /\\u0000/i;
const BLANK = /^\s*$/;

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

/** Fastify's JSON parser, refusing bodies with a NUL in any string (with the field named). */
export function jsonBodyParser(app: FastifyInstance): BodyParser {
  const parse = app.getDefaultJsonParser('error', 'error');
  return (request, body, done) => {
    const text = typeof body === 'string' ? body : body.toString('utf8');
    // Clients send `Content-Type: application/json` on a POST without a body
    // (sign out, say): that is no body, not malformed JSON.
    if (BLANK.test(text)) return done(null, undefined);
    parse(request, text, (error: Error | null, value?: unknown) => {
      if (error || !ESCAPED_NUL.test(text)) return done(error, value);
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
  },
  { name: 'json-body' },
);
