// Credentials that travel in a URL: a website's API key in
// GET /api/websites/api-key/:apiKey. Every log line that carries a URL passes
// it through here, so the key never reaches a log.

const API_KEY_IN_PATH = /(\/api-key\/)[^/?#]*/gi;

export function redactUrl(url: string): string {
  return url.replace(API_KEY_IN_PATH, '$1[redacted]');
}
