import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

// A loopback stand-in for a captcha provider's siteverify endpoint (the
// protocol Cloudflare Turnstile and hCaptcha share): a form-encoded POST of
// secret, response and remoteip, answered by JSON {success, error-codes}.
// It passes exactly the token `passToken` under `secret`, and records what it got.

export interface SiteverifyRequest {
  contentType: string | undefined;
  form: Record<string, string>;
}

export interface SiteverifyStandIn {
  url: string;
  /** `broken` answers 500, as a provider outage would. */
  mode: 'up' | 'broken';
  requests: SiteverifyRequest[];
  stop(): Promise<void>;
}

export async function startSiteverifyStandIn({ secret, passToken }: { secret: string; passToken: string }): Promise<SiteverifyStandIn> {
  const standIn = { mode: 'up' as SiteverifyStandIn['mode'], requests: [] as SiteverifyRequest[] };
  const server = createServer(async (request, response) => {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const form = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
    standIn.requests.push({ contentType: request.headers['content-type'], form });
    if (standIn.mode === 'broken') {
      response.writeHead(500, { 'content-type': 'text/plain' });
      return response.end('internal error');
    }
    const errors: string[] = [];
    if (form.secret !== secret) errors.push('invalid-input-secret');
    if (!form.response) errors.push('missing-input-response');
    else if (form.response !== passToken) errors.push('invalid-input-response');
    response.writeHead(200, { 'content-type': 'application/json' });
    response.end(JSON.stringify({ success: errors.length === 0, 'error-codes': errors, hostname: 'localhost' }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(standIn, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/siteverify`,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  });
}
