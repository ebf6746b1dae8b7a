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
