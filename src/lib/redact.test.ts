import { describe, expect, it } from 'vitest';
import { redactUrl } from './redact.ts';

// The cases of tests/api-key-logging.test.ts (which reads the app's real log
// lines), spelled out: what a log line shows for each URL.

describe('redactUrl', () => {
  it('replaces a credential whole, as written: an escaped & or # in it is part of it', () => {
    expect(redactUrl('/a?password=p%26ssw0rd&page=2')).toBe('/a?password=[redacted]&page=2');
    expect(redactUrl('/a?secret=x%23y')).toBe('/a?secret=[redacted]');
    expect(redactUrl('/a?token=a%252526b')).toBe('/a?token=[redacted]');
    expect(redactUrl('/a?password=a+b%26c#frag')).toBe('/a?password=[redacted]');
  });

  it("knows a credential's name in any spelling: case, _ or -, camelCase, escapes, a [] suffix", () => {
    for (const name of ['access_token', 'ACCESS_TOKEN', 'accessToken', 'access-token', 'refreshToken', 'newPassword', 'id_token', 'apiKey', 'api_key', 'key', 'acc%65ss_token', 'access_token[]', 'password[0]', 'code', 'auth_code', 'code_verifier', 'token_hash', 'client_secret', 'provider_token', 'provider_refresh_token', 'Authorization']) {
      expect(redactUrl(`/a?${name}=SECRET&page=2`), name).toBe(`/a?${name}=[redacted]&page=2`);
    }
    expect(redactUrl('/a?token%3DSECRET')).toBe('/a?[redacted]');
    // Separators inside a name, with no escape anywhere in the query.
    for (const name of ['pass_word', 'pass-word', 'pass.word', 'pass+word', 'sec_ret', 'to-ken']) {
      expect(redactUrl(`/a?${name}=SECRET&page=2`), name).toBe(`/a?${name}=[redacted]&page=2`);
    }
    // A query with no credential is left as it is.
    expect(redactUrl('/api/feedback/get-feedback?limit=20&offset=0&status=pending')).toBe('/api/feedback/get-feedback?limit=20&offset=0&status=pending');
  });

  it('replaces a parameter that holds a credential of its own (a URL in it), escaped once or twice', () => {
    expect(redactUrl('/a?next=%2Fcb%3Ftoken%3DSECRET&x=1')).toBe('/a?next=[redacted]&x=1');
    expect(redactUrl('/a?next=%252Fcb%253Ftoken%253DSECRET')).toBe('/a?next=[redacted]');
    expect(redactUrl('/a?foo=%26password=SECRET')).toBe('/a?foo=[redacted]');
    expect(redactUrl('/a?q=1;access_token=SECRET')).toBe('/a?q=[redacted]');
  });

  it('leaves everything else as it was', () => {
    for (const url of ['/', '/health', '/a?q=hello+world&page=2', '/a?search=key', '/a?keyword=x&monkey=1', '/a?postcode=1&zip_code=2&codes=3', '/a?password', '/a?x=%E0%A4%A', '/api/websites/api-key', '/api/websites/api-key/']) {
      expect(redactUrl(url), url).toBe(url);
    }
  });

  it('redacts the API key segment of GET /api/websites/api-key/:apiKey however the route is escaped, whatever the key holds', () => {
    expect(redactUrl('/api/websites/api-key/KEY?x=1')).toBe('/api/websites/api-key/[redacted]?x=1');
    expect(redactUrl('/api/websites/api%2Dkey/KEY')).toBe('/api/websites/api%2Dkey/[redacted]');
    expect(redactUrl('/api/websites/%61pi-key/KEY/')).toBe('/api/websites/%61pi-key/[redacted]/');
    expect(redactUrl('/api/websites/api-key/KEY%2Fmore%3Frest')).toBe('/api/websites/api-key/[redacted]');
    // A path the router cannot decode is refused before any route; none of it is logged, the key in it neither.
    expect(redactUrl('/api/websites/api-key%E0/KEY?x=1')).toBe('[undecodable path]?x=1');
  });
});
