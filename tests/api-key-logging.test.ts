import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebsite } from './support/analytics.ts';
import { buildTestAppWithLog } from './support/app.ts';

// A website's API key is a credential: it must never reach a log line, also
// when it travels in the path of GET /api/websites/api-key/:apiKey, and it
// can be sent in the X-API-Key header instead.

let lines: string[] = [];
let app: FastifyInstance;

beforeAll(async () => {
  ({ app, lines } = await buildTestAppWithLog({ RATE_LIMIT_GENERAL_PER_15MIN: '3' }, 'debug'));
});
afterAll(async () => app?.close());

describe('API keys in logs', () => {
  it('the key in the path is redacted from every log line, 429s included', async () => {
    const site = await createWebsite(app, 'Logged site');
    const unknownKey = `unknown-${crypto.randomUUID()}`;
    const remoteAddress = '192.0.2.201';
    for (const key of [site.apiKey, unknownKey, site.apiKey, site.apiKey]) {
      await app.inject({ method: 'GET', url: `/api/websites/api-key/${key}?x=1`, remoteAddress });
    }
    const all = lines.join('');
    expect(all).toContain('/api/websites/api-key/[redacted]');
    expect(lines.some((line) => line.includes('"msg":"request refused"') && line.includes('/api/websites/api-key/[redacted]'))).toBe(true);
    expect(all).not.toContain(site.apiKey);
    expect(all).not.toContain(unknownKey);
  });

  it('the key is redacted when the path spells the route with percent escapes, which the router decodes', async () => {
    const site = await createWebsite(app, 'Encoded path');
    const paths = [`/api/websites/api%2Dkey/${site.apiKey}`, `/api/websites/%61pi-key/${site.apiKey}`, `/api/websites/api-key/${site.apiKey}%2F`];
    for (const [index, path] of paths.entries()) {
      const response = await app.inject({ method: 'GET', url: path, remoteAddress: `192.0.2.${210 + index}` });
      expect(response.statusCode, path).not.toBe(500);
    }
    // The first two reach the route itself (so the key was a real credential in the URL).
    expect((await app.inject({ method: 'GET', url: paths[0], remoteAddress: '192.0.2.220' })).statusCode).toBe(200);
    expect(lines.join('')).not.toContain(site.apiKey);
  });

  it('a credential a client puts in the query string (access_token, apikey, …) is redacted too, though no route reads one there', async () => {
    const secrets = ['LEAKTOKEN' + crypto.randomUUID(), 'LEAKAPIKEY' + crypto.randomUUID(), 'LEAKPW' + crypto.randomUUID()];
    const urls = [
      `/health?access_token=${secrets[0]}&page=2`,
      `/api/admin/health?APIKEY=${secrets[1]}`,
      `/api/feedback/get-feedback?limit=5&password=${secrets[2]}#x`,
      `/health?%61ccess_token=${secrets[0]}`,
    ];
    for (const [index, url] of urls.entries()) await app.inject({ method: 'GET', url, remoteAddress: `192.0.2.${230 + index}` });
    const all = lines.join('');
    for (const secret of secrets) expect(all).not.toContain(secret);
    expect(all).toContain('/health?access_token=[redacted]&page=2');
  });

  it("a credential's value is redacted whole (an escaped & or # in it too), under the API's own names (accessToken, refreshToken, newPassword) and their spellings", async () => {
    // A password with & or # in it, sent properly escaped: decoding the whole URL and then
    // cutting the value at the first & or # logged the rest of the password.
    const tail = `TAIL${crypto.randomUUID().slice(0, 8)}`;
    const urls = [
      `/health?password=pa%26${tail}-1`,
      `/health?secret=x%23${tail}-2&page=1`,
      `/health?page=1&password=p%2526%26${tail}-3`,
      `/health?accessToken=${tail}-4`,
      `/health?refreshToken=${tail}-5&page=2`,
      `/health?newPassword=${tail}-6`,
      `/health?api-key=${tail}-7`,
      `/health?access_token[]=${tail}-8`,
      `/health?%61ccessToken=${tail}-9`,
      `/api/websites/api%2Dkey/x?password=a%26${tail}-10`,
    ];
    for (const [index, url] of urls.entries()) await app.inject({ method: 'GET', url, remoteAddress: `192.0.2.${240 + index}` });
    const all = lines.join('');
    for (const index of urls.keys()) expect(all, urls[index]).not.toContain(`${tail}-${index + 1}`);
    expect(all).toContain('/health?refreshToken=[redacted]&page=2');
  });

  it('accepts the key in X-API-Key on GET /api/websites/api-key', async () => {
    const site = await createWebsite(app, 'Header site');
    const response = await app.inject({ method: 'GET', url: '/api/websites/api-key', headers: { 'x-api-key': site.apiKey }, remoteAddress: '192.0.2.202' });
    expect(response.statusCode).toBe(200);
    expect(response.json().data.id).toBe(site.id);
    const missing = await app.inject({ method: 'GET', url: '/api/websites/api-key', remoteAddress: '192.0.2.202' });
    expect(missing.statusCode).toBe(401);
    expect(missing.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
    const wrong = await app.inject({ method: 'GET', url: '/api/websites/api-key', headers: { 'x-api-key': 'nope' }, remoteAddress: '192.0.2.203' });
    expect(wrong.statusCode).toBe(404);
    expect(lines.join('')).not.toContain(site.apiKey);
  });
});
