import postgres from 'postgres';

// The same database under another login: the local stack and the tests
// connect the API as `authenticator` (the login role that can only switch to
// anon, authenticated and service_role) and run migrations as the owner.

export function asLoginRole(url: string, role = 'authenticator'): string {
  const parsed = new URL(url);
  parsed.username = role;
  parsed.password = '';
  return parsed.toString();
}

/** A URL as postgres.js reads it, and the host to give it apart from the URL. */
export interface DriverTarget {
  url: string;
  host?: string;
}

/**
 * libpq's ways of naming the server that postgres.js does not read: a Unix
 * socket's directory as the host, percent-encoded
 * (postgres://user@%2Fvar%2Frun%2Fpostgresql/db), and a `host` parameter
 * (postgres://user:password@localhost/db?host=/var/run/postgresql). The
 * driver looked the first up in DNS and sent the second to the server as a
 * setting, which refused it ("unrecognized configuration parameter"); both
 * now reach the driver as its own `host` option, the URL keeping the rest.
 * Any other URL is returned as it is.
 */
export function driverTarget(url: string): DriverTarget {
  const authorityStart = url.indexOf('://') + 3;
  if (authorityStart < 3) return { url };
  const pathStart = url.slice(authorityStart).search(/[/?#]/);
  const authorityEnd = pathStart < 0 ? url.length : authorityStart + pathStart;
  const authority = url.slice(authorityStart, authorityEnd);
  const hostStart = authority.lastIndexOf('@') + 1;
  const hostAndPort = authority.slice(hostStart);
  const port = /:\d*$/.exec(hostAndPort)?.[0] ?? '';
  let host: string | undefined;
  let rest = url.slice(authorityEnd);
  try {
    const named = decodeURIComponent(hostAndPort.slice(0, hostAndPort.length - port.length));
    if (named.startsWith('/')) host = named;
  } catch {
    return { url };
  }
  const queryStart = rest.indexOf('?');
  if (queryStart >= 0) {
    const fragmentStart = rest.indexOf('#', queryStart);
    const queryEnd = fragmentStart < 0 ? rest.length : fragmentStart;
    const query = new URLSearchParams(rest.slice(queryStart + 1, queryEnd));
    const named = query.get('host');
    if (named) host = named;
    if (query.has('host')) {
      query.delete('host');
      const kept = query.toString();
      rest = `${rest.slice(0, queryStart)}${kept ? `?${kept}` : ''}${rest.slice(queryEnd)}`;
    }
  }
  if (host === undefined) return { url };
  return { url: `${url.slice(0, authorityStart)}${authority.slice(0, hostStart)}localhost${port}${rest}`, host };
}

/**
 * How every connection writes dates and times, whatever the database's or the
 * role's defaults. postgres.js, and the project's own timestamp helpers, read
 * a timestamp's text with `new Date()`, which takes ISO but not the SQL,
 * German or Postgres styles a self-hosted database may be set to
 * (`29/11/2026 19:53:08.42 CET`): under `DateStyle = 'SQL, DMY'` every
 * feedback, website and log answer was a 500, some after their write had
 * committed. UTC, so that nothing the database prints depends on its zone.
 */
export const SESSION_DATE_SETTINGS = { DateStyle: 'ISO, MDY', TimeZone: 'UTC' } as const;

/** postgres.js's pool for `url`, a socket directory or `host` parameter in it included (driverTarget), reading dates as ISO. */
export function connectPostgres(url: string, options: postgres.Options<{}>): postgres.Sql {
  const target = driverTarget(url);
  const withDates = { ...options, connection: { ...SESSION_DATE_SETTINGS, ...options.connection } };
  return postgres(target.url, target.host === undefined ? withDates : { ...withDates, host: target.host });
}
