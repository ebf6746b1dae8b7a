import { randomBytes, randomInt } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, inject } from 'vitest';
import { issueIdToken } from '../../scripts/stack/oidc-issuer.ts';
import { buildTestApp } from './app.ts';
import { uniqueEmail } from './db.ts';
import type { RealAuth } from './global-setup.ts';

// Helpers for the suites that run against the real Supabase Auth server of
// this run's stack (null when no binary was found: those suites do not run).

/**
 * This test file's client address. The auth server limits sign-ups per
 * client address (a burst of 30), and every suite runs on 127.0.0.1 against
 * the one auth server of the run: each file's requests come from an address
 * of its own (X-Forwarded-For, believed from loopback), so suites running at
 * the same time do not spend each other's budget.
 */
export const CLIENT_ADDRESS = `10.${randomInt(256)}.${randomInt(256)}.${1 + randomInt(254)}`;

export function realAuth(): RealAuth | null {
  return inject('stack').auth;
}

/** The settings that point an app or a server process at the real auth server. */
export function realAuthEnv(auth: RealAuth): Record<string, string> {
  return { SUPABASE_URL: auth.url, SUPABASE_ANON_KEY: auth.anonKey, SUPABASE_SERVICE_ROLE_KEY: auth.serviceRoleKey, TRUST_PROXY: '127.0.0.1' };
}

/** An app against the real auth server, listening on loopback from before the suite's tests until after them; `base` is its URL. */
export function useRealAuthApp(auth: RealAuth): { readonly base: string } {
  let server: FastifyInstance | undefined;
  const listening = { base: '' };
  beforeAll(async () => {
    server = await buildTestApp(realAuthEnv(auth));
    listening.base = await server.listen({ host: '127.0.0.1', port: 0 });
  }, 60_000);
  afterAll(async () => server?.close());
  return listening;
}

/**
 * A gateway in front of the auth server, as a deployment may have one: each
 * request, its body read, goes to `handle`, which answers it itself or calls
 * `forward` for the auth server's answer. `url` is what an app's
 * SUPABASE_URL names to go through it.
 */
export async function startAuthGateway(
  auth: RealAuth,
  handle: (request: IncomingMessage, response: ServerResponse, forward: () => Promise<Response>) => Promise<void>,
): Promise<{ url: string; close(): Promise<void> }> {
  const gateway = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const headers = Object.fromEntries(Object.entries(request.headers).filter(([name]) => name !== 'host' && name !== 'content-length')) as Record<string, string>;
    const forward = () => fetch(`${auth.url}${request.url}`, { method: request.method, headers, body: body.length > 0 ? body : undefined });
    await handle(request, response, forward);
  });
  await new Promise<void>((resolve) => gateway.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(gateway.address() as AddressInfo).port}`,
    async close() {
      gateway.closeAllConnections();
      await new Promise((resolve) => gateway.close(resolve));
    },
  };
}

/** An id token for `email` from the stack's OIDC issuer (the `keycloak` provider), via its code flow; with `nonce`, the token carries it. */
export function idTokenFor(auth: RealAuth, email: string, options: { nonce?: string } = {}): Promise<string> {
  return issueIdToken(auth.oidc, auth.oidc.redirectUri, email, options);
}

export interface SinkMessage {
  to: string[];
  subject: string;
  html: string;
  text: string;
}

/** Messages the stack's SMTP sink has received for `email`. */
export async function messagesTo(email: string): Promise<SinkMessage[]> {
  const response = await fetch(`${inject('stack').mailApiUrl}/messages`);
  const messages = (await response.json()) as SinkMessage[];
  return messages.filter((message) => message.to.includes(email));
}

/** The first link of an e-mail (the reset e-mail's link to the front end); empty when there is none. */
export function linkIn(mail: SinkMessage): string {
  return mail.html.match(/href="([^"]+)"/)?.[1] ?? '';
}

/** The reset token a reset e-mail's link carries, for update-password. */
export function resetTokenIn(mail: SinkMessage): string {
  return new URL(linkIn(mail)).searchParams.get('token')!;
}

export interface HttpAnswer {
  status: number;
  /** Whatever JSON the route answered; each test asserts its shape. */
  body: any;
  headers: Headers;
}

/** A JSON request against a running server, optionally with a bearer token. */
export async function call(baseUrl: string, method: string, path: string, options: { token?: string; body?: unknown } = {}): Promise<HttpAnswer> {
  const headers: Record<string, string> = { 'x-forwarded-for': CLIENT_ADDRESS };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  const response = await fetch(`${baseUrl}${path}`, {
    method,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  return { status: response.status, body: await response.json(), headers: response.headers };
}

export interface SignedUp {
  id: string;
  email: string;
  password: string;
  accessToken: string;
  refreshToken: string;
}

/** Signs a new account up through our API and returns its session. */
export async function signUp(baseUrl: string, label: string, name = 'Test User'): Promise<SignedUp> {
  const email = uniqueEmail(label);
  const password = `pw-${randomBytes(6).toString('hex')}`;
  const answer = await call(baseUrl, 'POST', '/api/auth/signup', { body: { email, password, name } });
  if (answer.status !== 201) throw new Error(`sign-up of ${email} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  const { user, session } = answer.body.data;
  return { id: user.id, email, password, accessToken: session.accessToken, refreshToken: session.refreshToken };
}
