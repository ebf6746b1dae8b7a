// Credentials that travel in a URL: a website's API key in
// GET /api/websites/api-key/:apiKey, and whatever a client puts in the query
// string under a credential's name (no route reads one there, but a client
// that sends `?access_token=` would otherwise have it logged). Every log line
// that carries a URL passes it through here, so they never reach a log.

const API_KEY_IN_PATH = /(\/api-key\/)[^/?#]*/gi;
const CREDENTIAL_IN_QUERY = /([?&](?:access_token|refresh_token|id_token|token|apikey|api_key|key|password|secret)=)[^&#]*/gi;
const PERCENT_ESCAPE = /%[0-9a-f]{2}/i;

const redactCredentials = (url: string) => url.replace(API_KEY_IN_PATH, '$1[redacted]').replace(CREDENTIAL_IN_QUERY, '$1[redacted]');

export function redactUrl(url: string): string {
  const redacted = redactCredentials(url);
  if (!PERCENT_ESCAPE.test(url)) return redacted;
  // The router matches the decoded path, so /api%2Dkey/<key> and /%61pi-key/<key>
  // reach the same route (and a query's names are decoded alike): when the
  // decoded URL names a credential, log it decoded and redacted; when it
  // cannot be decoded, log none of it.
  let decoded: string;
  try {
    decoded = decodeURIComponent(url);
  } catch {
    return '[undecodable URL]';
  }
  const decodedRedacted = redactCredentials(decoded);
  return decodedRedacted === decoded ? redacted : decodedRedacted;
}
