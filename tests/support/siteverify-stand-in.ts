import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

// A loopback stand-in for a captcha provider's siteverify endpoint (the
// protocol Cloudflare Turnstile and hCaptcha share): a form-encoded POST of
// secret, response and remoteip, answered by JSON {success, error-codes}.
// It passes exactly the token `passToken` under `secret`, and records what it got.
// A pass names, as the providers' do, the hostname the widget was solved on
// and (Turnstile) its action; either may be changed between requests, and
// `undefined` leaves it out, as hCaptcha does with its hostname setting off.

export interface SiteverifyRequest {
  contentType: string | undefined;
  form: Record<string, string>;
}

export interface SiteverifyStandIn {
  url: string;
  /** `broken` answers 500, as a provider outage would. */
  mode: 'up' | 'broken';
  /** The `hostname` of a pass; `localhost` unless changed. */
  hostname: string | undefined;
  /** The `action` of a pass; none unless set. */
  action: string | undefined;
  requests: SiteverifyRequest[];
  stop(): Promise<void>;
}

export async function startSiteverifyStandIn({
  secret,
  passToken,
  hostname = 'localhost',
  action,
}: {
  secret: string;
  passToken: string;
  hostname?: string;
  action?: string;
}): Promise<SiteverifyStandIn> {
  const standIn = { mode: 'up' as SiteverifyStandIn['mode'], hostname: hostname as string | undefined, action, requests: [] as SiteverifyRequest[] };
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
    // As the providers answer: a refusal names no hostname nor action.
    const solved = errors.length === 0 ? { challenge_ts: new Date().toISOString(), hostname: standIn.hostname, action: standIn.action } : {};
    response.end(JSON.stringify({ success: errors.length === 0, 'error-codes': errors, ...solved }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return Object.assign(standIn, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/siteverify`,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  });
}
