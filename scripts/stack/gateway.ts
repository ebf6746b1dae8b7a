import { readFile } from 'node:fs/promises';
import { createServer, request as forward, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

// The local stack's API gateway, in the place Kong has under `supabase start`:
// Supabase Auth is served at /auth/v1 on a port of its own, so SUPABASE_URL
// has the same shape locally and hosted. Like Kong it asks for an API key
// (except on the routes a browser opens from an e-mail or a provider), and it
// appends the caller's address to X-Forwarded-For; the auth server keys its
// per-IP limits on the first address, which our API sets to its client's.

const AUTH_PREFIX = '/auth/v1';
/** Routes a browser reaches without an API key (Kong's "open" auth routes). */
const OPEN_AUTH_PATHS = new Set(['/verify', '/callback', '/authorize']);

export interface GatewayOptions {
  port?: number;
  /** Where the auth server listens now; read per request, so it may change across restarts. */
  authUpstream: () => string;
  apiKeys: string[];
  /** Files the auth server fetches (e-mail templates), served at /templates/<name>. */
  templates?: Record<string, string>;
}

export interface Gateway {
  url: string;
  port: number;
  stop(): Promise<void>;
}

function sendJson(response: ServerResponse, status: number, body: unknown) {
  response.writeHead(status, { 'content-type': 'application/json' });
  response.end(JSON.stringify(body));
}

function apiKeyOf(request: IncomingMessage): string | undefined {
  const header = request.headers.apikey;
  if (typeof header === 'string') return header;
  return new URL(request.url ?? '/', 'http://gateway').searchParams.get('apikey') ?? undefined;
}

export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const server: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://gateway');

    const template = url.pathname.startsWith('/templates/') ? options.templates?.[url.pathname.slice('/templates/'.length)] : undefined;
    if (template) {
      readFile(template).then(
        (body) => response.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(body),
        () => sendJson(response, 404, { message: 'no such template' }),
      );
      return;
    }

    if (url.pathname !== AUTH_PREFIX && !url.pathname.startsWith(`${AUTH_PREFIX}/`)) {
      return sendJson(response, 404, { message: 'no Route matched with those values' });
    }
    const upstreamPath = url.pathname.slice(AUTH_PREFIX.length) || '/';
    const key = apiKeyOf(request);
    if (!OPEN_AUTH_PATHS.has(upstreamPath) && (!key || !options.apiKeys.includes(key))) {
      return sendJson(response, 401, { message: key ? 'Invalid API key' : 'No API key found in request' });
    }

    const upstream = new URL(`${upstreamPath}${url.search}`, options.authUpstream());
    const forwardedFor = [request.headers['x-forwarded-for'], request.socket.remoteAddress].filter(Boolean).join(', ');
    const proxied = forward(
      upstream,
      { method: request.method, headers: { ...request.headers, host: upstream.host, 'x-forwarded-for': forwardedFor } },
      (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      },
    );
    // The auth server stopped or restarting: what Kong answers then.
    proxied.on('error', () => {
      if (!response.headersSent) sendJson(response, 502, { message: 'An invalid response was received from the upstream server' });
      else response.destroy();
    });
    request.pipe(proxied);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
