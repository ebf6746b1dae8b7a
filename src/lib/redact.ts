// Credentials that travel in a URL: a website's API key in
// GET /api/websites/api-key/:apiKey. Every log line that carries a URL passes
// it through here, so the key never reaches a log.

const API_KEY_IN_PATH = /(\/api-key\/)[^/?#]*/gi;
const PERCENT_ESCAPE = /%[0-9a-f]{2}/i;

export function redactUrl(url: string): string {
  const redacted = url.replace(API_KEY_IN_PATH, '$1[redacted]');
  if (!PERCENT_ESCAPE.test(url)) return redacted;
  // The router matches the decoded path, so /api%2Dkey/<key> and /%61pi-key/<key>
  // reach the same route: when the decoded URL names that route, log it
  // decoded and redacted; when it cannot be decoded, log none of its path.
  let decoded: string;
  try {
    decoded = decodeURIComponent(url);
  } catch {
    return '[undecodable URL]';
  }
  return /\/api-key\//i.test(decoded) ? decoded.replace(API_KEY_IN_PATH, '$1[redacted]') : redacted;
}
