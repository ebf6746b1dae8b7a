// Credentials that travel in a URL: a website's API key in
// GET /api/websites/api-key/:apiKey, and whatever a client puts in the query
// string under a credential's name (no route reads one there, but a client
// that sends `?access_token=` would otherwise have it logged). Every log line
// that carries a URL passes it through here, so they never reach a log.
//
// The URL is cut as the router and the query parser cut it, on a raw `/`,
// `?` and `&` only, and a credential is replaced whole, as it was written:
// decoding the URL first and then cutting the value at the first `&` or `#`
// logged whatever followed an escaped `%26` or `%23` in a password.

/**
 * Query names that carry a credential, compared without case, `_`, `-`, `.`,
 * spaces or a trailing `[]`/`[n]`: `access_token`, `accessToken` and
 * `access-token` alike, the API's own body names (`refreshToken`,
 * `newPassword`) that a client may put in a query by mistake, and what OAuth,
 * PKCE and Supabase Auth's e-mail links carry in one (`code`, `auth_code`,
 * `code_verifier`, `token_hash`, `client_secret`, `provider_token`,
 * `provider_refresh_token`, an `authorization` header written as a parameter).
 */
const CREDENTIAL_NAMES = new Set([
  'accesstoken',
  'refreshtoken',
  'idtoken',
  'token',
  'tokenhash',
  'apikey',
  'key',
  'password',
  'newpassword',
  'secret',
  'clientsecret',
  'code',
  'authcode',
  'codeverifier',
  'providertoken',
  'providerrefreshtoken',
  'authorization',
]);

/** The ASCII escapes decoded, any other left as written: never throws, and the names compared here are ASCII. */
function decodeAsciiEscapes(text: string): string {
  return text.replace(/%([0-7][0-9a-f])/gi, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)));
}

function isCredentialName(decodedName: string): boolean {
  return CREDENTIAL_NAMES.has(
    decodedName
      .trim()
      .toLowerCase()
      .replace(/\[[^\]]*\]$/, '')
      .replace(/[-_.\s]/g, ''),
  );
}

/** A `name=value` whose name is a credential's. */
function isCredentialPair(piece: string): boolean {
  const equals = piece.indexOf('=');
  return equals > 0 && isCredentialName(piece.slice(0, equals));
}

/**
 * Whether a pair of the query is a credential, or holds one: escapes decoded
 * (up to three times, for an escape escaped again), it has a credential's
 * `name=` at its start or after a `?`, `&`, `#` or `;` (a URL in a parameter:
 * `next=%2Fcb%3Ftoken%3D…`; `token%3Dabc`, a name the parser reads whole).
 */
function holdsCredential(pair: string): boolean {
  let text = pair;
  for (let round = 0; round < 3; round += 1) {
    const decoded = decodeAsciiEscapes(text.replaceAll('+', ' '));
    if (decoded.split(/[?&#;]/).some(isCredentialPair)) return true;
    if (decoded === text) return false;
    text = decoded;
  }
  return false;
}

/** One pair of the query, its value replaced whole, as written, when it is or holds a credential. */
function redactPair(pair: string): string {
  if (!holdsCredential(pair)) return pair;
  const equals = pair.indexOf('=');
  return equals === -1 ? '[redacted]' : `${pair.slice(0, equals)}=[redacted]`;
}

/** Words every credential name holds; a query with none of them and no escape to hide one holds no credential. */
const CREDENTIAL_WORD = /token|key|password|secret|code|authorization/i;

function redactQuery(query: string): string {
  // Every request's log line comes through here: most queries (limit=20&offset=0) are let by at once.
  // Names are compared without `-`, `_`, `.` or spaces (`+`): so is the query here (pass_word is password).
  if (!query.includes('%') && !CREDENTIAL_WORD.test(query.replace(/[-_.+\s]/g, ''))) return query;
  return query.split('&').map(redactPair).join('&');
}

/**
 * The path with the API key of GET /api/websites/api-key/:apiKey redacted: the
 * router matches the decoded path, so /api%2Dkey/<key> and /%61pi-key/<key>
 * reach the same route. Segment by segment, as written: the whole segment
 * after `api-key` goes, an escaped `/`, `?` or `#` in it included.
 */
function redactPath(path: string): string {
  // Most paths hold neither an escape nor the route's name: let by at once.
  if (!path.includes('%') && !/api-key/i.test(path)) return path;
  // One the router cannot decode is refused (400) before any route: none of it is logged.
  try {
    decodeURIComponent(path);
  } catch {
    return '[undecodable path]';
  }
  const segments = path.split('/');
  for (let index = 0; index < segments.length - 1; index += 1) {
    if (segments[index + 1] !== '' && decodeAsciiEscapes(segments[index]).toLowerCase() === 'api-key') segments[index + 1] = '[redacted]';
  }
  return segments.join('/');
}

export function redactUrl(url: string): string {
  const queryAt = url.indexOf('?');
  if (queryAt === -1) return redactPath(url);
  return `${redactPath(url.slice(0, queryAt))}?${redactQuery(url.slice(queryAt + 1))}`;
}
