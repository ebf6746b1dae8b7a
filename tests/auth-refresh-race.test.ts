import { randomInt } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { buildTestApp } from './support/app.ts';
import { call, type HttpAnswer, realAuth, realAuthEnv, signUp, startAuthGateway, useRealAuthApp } from './support/real-auth.ts';

// One refresh token sent to POST /api/auth/refresh many times at once (two
// tabs waking up, a client retrying against two instances), against the real
// Supabase Auth server. The auth server refreshes a session one request at a
// time and tells a request that waited its 5 s for the lock `409 conflict`;
// that was our 401, and a front end signs its user out on a 401 from refresh.

const auth = realAuth();

/** Each race from an address of its own: the auth server allows one address a burst of 30 refreshes. */
const newAddress = () => `10.${randomInt(256)}.${randomInt(256)}.${1 + randomInt(254)}`;

const refreshAt = (base: string, address: string, refreshToken: string): Promise<HttpAnswer> =>
  fetch(`${base}/api/auth/refresh`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-forwarded-for': address },
    body: JSON.stringify({ refreshToken }),
  }).then(async (response) => ({ status: response.status, body: await response.json(), headers: response.headers }));

const tally = (answers: HttpAnswer[]) =>
  answers.reduce<Record<string, number>>((counts, { status, body }) => {
    const key = status === 200 ? '200' : `${status} ${body.error}`;
    return { ...counts, [key]: (counts[key] ?? 0) + 1 };
  }, {});

const isRefreshCall = (url: string | undefined) => Boolean(url?.startsWith('/auth/v1/token?grant_type=refresh_token'));
/** The auth server's answer as it gave it, headers too: supabase-js reads an error's code only when the API version header came with it. */
const passOn = async (response: ServerResponse, upstream: Response) => {
  const headers = Object.fromEntries([...upstream.headers].filter(([name]) => !['content-length', 'content-encoding', 'transfer-encoding', 'connection'].includes(name)));
  response.writeHead(upstream.status, headers).end(await upstream.text());
};
/** The auth server's own 409 for a refresh that waited its 5 s for the session's lock (v2.196.0, as recorded). */
const sayConflict = (response: ServerResponse) =>
  void response
    .writeHead(409, { 'content-type': 'application/json', 'x-supabase-api-version': '2024-01-01' })
    .end(JSON.stringify({ code: 'conflict', message: 'Too many concurrent token refresh requests on the same session or refresh token' }));

/** The answers all carry one refresh token, and each access token among them is taken by GET /api/auth/me. */
async function expectOneWorkingSession(base: string, answers: HttpAnswer[], userId: string) {
  const refreshTokens = new Set(answers.map((answer) => answer.body.data.session.refreshToken));
  // Requests that come after the winner, within the reuse interval, are handed its refresh token.
  expect(refreshTokens.size).toBe(1);
  for (const accessToken of new Set(answers.map((answer) => answer.body.data.session.accessToken as string))) {
    const me = await call(base, 'GET', '/api/auth/me', { token: accessToken });
    expect(me.status).toBe(200);
    expect(me.body.data.id).toBe(userId);
  }
  return [...refreshTokens][0] as string;
}

describe.runIf(auth)('refreshes of one token at once, against the real Supabase Auth server', () => {
  const listening = useRealAuthApp(auth!);

  for (const n of [8, 20]) {
    it(`${n} refreshes of one token at once: every one is 200, with tokens that work`, { timeout: 90_000 }, async () => {
      const account = await signUp(listening.base, `refresh-race-${n}`);
      const address = newAddress();
      const answers = await Promise.all(Array.from({ length: n }, () => refreshAt(listening.base, address, account.refreshToken)));
      expect(tally(answers)).toEqual({ '200': n });
      const current = await expectOneWorkingSession(listening.base, answers, account.id);
      // The session lives on: its current refresh token refreshes again.
      expect((await refreshAt(listening.base, address, current)).status).toBe(200);
    });
  }

  it('16 refreshes of one token at once over 8 instances (8 at once at the auth server): every one is 200, with tokens that work', { timeout: 120_000 }, async () => {
    // Each instance sends the auth server one refresh for its requests, so the
    // auth server's losers here say `conflict` (a gateway that passes everything
    // on counts them) and are tried again. Under the 10 s default a host as
    // busy as a test run's can spend it all on the auth server's 5 s wait and
    // the try after it (then 503, the test below); the test is of the retry.
    let conflicts = 0;
    const gateway = await startAuthGateway(auth!, async (request, response, forward) => {
      const upstream = await forward();
      if (isRefreshCall(request.url) && upstream.status === 409) conflicts += 1;
      await passOn(response, upstream);
    });
    const instances = await Promise.all(Array.from({ length: 8 }, () => buildTestApp({ ...realAuthEnv({ ...auth!, url: gateway.url }), AUTH_TIMEOUT_MS: '25000' })));
    try {
      const urls = await Promise.all(instances.map((instance) => instance.listen({ host: '127.0.0.1', port: 0 })));
      const account = await signUp(listening.base, 'refresh-race-instances');
      const address = newAddress();
      const answers = await Promise.all([...urls, ...urls].map((url) => refreshAt(url, address, account.refreshToken)));
      expect(tally(answers), `with ${conflicts} conflict(s) from the auth server`).toEqual({ '200': 16 });
      await expectOneWorkingSession(listening.base, answers, account.id);
      console.info(`8 instances at once: the auth server answered ${conflicts} refresh(es) with 409 conflict; every request was 200`);
    } finally {
      await Promise.all(instances.map((instance) => instance.close()));
      await gateway.close();
    }
  });

  it('a refresh token of a session that was signed out is still 401, at once and many times at once', { timeout: 60_000 }, async () => {
    const account = await signUp(listening.base, 'refresh-race-signed-out');
    expect((await call(listening.base, 'POST', '/api/auth/signout', { token: account.accessToken })).status).toBe(200);
    const address = newAddress();
    expect((await refreshAt(listening.base, address, account.refreshToken)).status).toBe(401);
    const answers = await Promise.all(Array.from({ length: 8 }, () => refreshAt(listening.base, address, account.refreshToken)));
    expect(tally(answers)).toEqual({ '401 Invalid or expired refresh token': 8 });
  });
});

describe.runIf(auth)('refresh when the auth server answers 409 conflict', () => {
  // The auth server says `conflict` only while other requests hold the
  // session, which a test cannot time; a gateway in front of it says it for
  // the refreshes a test picks and passes everything else on.
  async function appBehindGateway(conflictsToSay: number, timeoutMs: string) {
    const seen = { refreshes: 0, conflictsToSay };
    const gateway = await startAuthGateway(auth!, async (request, response, forward) => {
      if (isRefreshCall(request.url) && (seen.refreshes += 1) <= seen.conflictsToSay) {
        return sayConflict(response);
      }
      await passOn(response, await forward());
    });
    const app = await buildTestApp({ ...realAuthEnv({ ...auth!, url: gateway.url }), AUTH_TIMEOUT_MS: timeoutMs });
    const base = await app.listen({ host: '127.0.0.1', port: 0 });
    return { base, seen, close: async () => (await app.close(), await gateway.close()) };
  }

  it('a refresh answered 409 conflict is tried again: 200, with a session that works', { timeout: 60_000 }, async () => {
    const behind = await appBehindGateway(1, '10000');
    try {
      const account = await signUp(behind.base, 'refresh-conflict-once');
      const answer = await refreshAt(behind.base, newAddress(), account.refreshToken);
      expect({ status: answer.status, error: answer.body.error }).toEqual({ status: 200, error: undefined });
      expect(behind.seen.refreshes).toBe(2);
      await expectOneWorkingSession(behind.base, [answer], account.id);
    } finally {
      await behind.close();
    }
  });

  it('still 409 after a few tries: 503 with Retry-After within AUTH_TIMEOUT_MS, never 401', { timeout: 60_000 }, async () => {
    const behind = await appBehindGateway(Number.POSITIVE_INFINITY, '3000');
    try {
      const account = await signUp(behind.base, 'refresh-conflict-always');
      const started = performance.now();
      const answer = await refreshAt(behind.base, newAddress(), account.refreshToken);
      expect({ status: answer.status, body: answer.body }).toEqual({
        status: 503,
        body: { success: false, error: 'Authentication service unavailable', statusCode: 503, requestId: expect.any(String) },
      });
      expect(answer.headers.get('retry-after')).toBe('5');
      expect(behind.seen.refreshes).toBe(4);
      expect(performance.now() - started).toBeLessThan(3_500);
      // The token was good all along: asked again once the auth server is free, it refreshes.
      behind.seen.conflictsToSay = 0;
      const again = await refreshAt(behind.base, newAddress(), account.refreshToken);
      expect(again.status).toBe(200);
      await expectOneWorkingSession(behind.base, [again], account.id);
    } finally {
      await behind.close();
    }
  });
});
