import type { FastifySchemaCompiler } from 'fastify';
import { parse } from 'fast-querystring';

/**
 * Fastify's query-string parser (fast-querystring), with a key given no value
 * (`?status=&offset=`) treated as not given. A front end's "All" option
 * sends an empty value; before, `status=` was refused while `offset=` was
 * quietly 0. A key repeated with some empty values keeps the others.
 */
export function parseQueryString(text: string): Record<string, unknown> {
  const query = parse(text) as Record<string, string | string[]>;
  for (const [key, value] of Object.entries(query)) {
    if (Array.isArray(value)) {
      const given = value.filter((item) => item !== '');
      if (given.length === 0) delete query[key];
      else query[key] = given.length === 1 ? given[0] : given;
    } else if (value === '') {
      delete query[key];
    }
  }
  return query;
}

/** What a route's compiled validator returns. */
type ValidationResult = ReturnType<ReturnType<FastifySchemaCompiler<unknown>>>;

/**
 * No query parameter takes more than one value, and a key given twice
 * (`?limit=1&limit=2`, a multi-select's `status=pending&status=resolved`)
 * arrives as an array that each key's own rule refused with its usual words
 * ("Limit must be an integer from 1 to 100", though both were). Its issue says
 * what is wrong instead.
 */
export function namingRepeatedKeys(result: ValidationResult, query: Record<string, unknown>): ValidationResult {
  if (typeof result !== 'object' || !('error' in result) || !Array.isArray(result.error)) return result;
  for (const issue of result.error) {
    const key = issue.instancePath.split('/')[1];
    const value = key === undefined ? undefined : query[key];
    if (Array.isArray(value)) issue.message = `${key} must be given once, not ${value.length} times`;
  }
  return result;
}
