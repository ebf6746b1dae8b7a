import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair, SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';

// When the auth server's JWKS cannot be fetched, the caller's token was not
// shown to be bad: the answer is 503, not 401 (which would make clients sign
// their users out). A token whose key the JWKS does not hold is still 401.

let server: Server;
let mode: 'ok' | 'error' = 'ok';
const ANON_KEY = 'anon-key-of-the-project';
/** The apikey header of each JWKS request: the project's gateway answers a request without the anon key 401. */
const apikeysSeen: (string | undefined)[] = [];
let baseUrl: string;
const keys = await generateKeyPair('ES256');
const stranger = await generateKeyPair('ES256');

beforeAll(async () => {
  const jwk = { ...(await exportJWK(keys.publicKey)), kid: 'key-1', alg: 'ES256', use: 'sig' };
  server = createServer((request, response) => {
    if (mode === 'error' || !request.url?.endsWith('/auth/v1/.well-known/jwks.json')) {
      response.writeHead(500).end('upstream broke');
      return;
    }
    const apikey = request.headers.apikey as string | undefined;
    apikeysSeen.push(apikey);
    if (apikey !== ANON_KEY) {
      response.writeHead(401, { 'content-type': 'application/json' }).end('{"message":"No API key found in request"}');
      return;
    }
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [jwk] }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => new Promise((resolve) => server.close(resolve)));

const token = (key: (typeof keys)["privateKey"], kid = 'key-1') =>
  new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: crypto.randomUUID() })
    .setProtectedHeader({ alg: 'ES256', kid })
    .setSubject(crypto.randomUUID())
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(key);

describe('JWKS fetch failures', () => {
  it('a JWKS that answers 500, or a host that refuses connections → 503 in the envelope', async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const probe = createServer();
      probe.listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as AddressInfo;
        probe.close(() => resolve(port));
      });
    });
    for (const [label, url] of [
      ['500', baseUrl],
      ['refused', `http://127.0.0.1:${closedPort}`],
    ] as const) {
      mode = 'error';
      const app = await buildTestApp({ SUPABASE_URL: url });
      try {
        const response = await app.inject({ method: 'GET', url: '/api/users/me', headers: { authorization: `Bearer ${await token(keys.privateKey)}` } });
        expect(response.statusCode, label).toBe(503);
        expect(response.json(), label).toEqual({
          success: false,
          error: 'Authentication service unavailable',
          statusCode: 503,
          requestId: expect.any(String),
        });
      } finally {
        await app.close();
      }
    }
  });

  it('with the JWKS up, a token signed by a key it does not hold is still 401; the keys are asked for with the anon key', async () => {
    mode = 'ok';
    apikeysSeen.length = 0;
    const app = await buildTestApp({ SUPABASE_URL: baseUrl, SUPABASE_ANON_KEY: ANON_KEY });
    try {
      for (const bad of [await token(stranger.privateKey), await token(stranger.privateKey, 'unknown-kid')]) {
        const response = await app.inject({ method: 'GET', url: '/api/users/me', headers: { authorization: `Bearer ${bad}` } });
        expect(response.statusCode).toBe(401);
      }
    } finally {
      await app.close();
    }
    expect(apikeysSeen.length).toBeGreaterThan(0);
    expect(apikeysSeen.every((apikey) => apikey === ANON_KEY)).toBe(true);
  });
});
