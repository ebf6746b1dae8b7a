import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';

// A loopback stand-in for the Resend API's POST /emails: real HTTP, records
// every request, keeps Resend's idempotency semantics (a repeated
// Idempotency-Key returns the first answer and sends nothing new) and fails
// on demand: `down` answers 503, `refuse` answers 422 as Resend does for a
// message it will never accept.

export interface ResendRequest {
  authorization: string | undefined;
  userAgent: string | undefined;
  idempotencyKey: string | undefined;
  body: { from: string; to: string[] | string; subject: string; html: string; text: string };
  status: number;
  /** A repeat of an accepted key: answered, not sent again. */
  replayed: boolean;
}

export type ResendMode = 'up' | 'down' | 'refuse';

export interface ResendStandIn {
  url: string;
  mode: ResendMode;
  /** Milliseconds each answer waits, to make sends overlap. */
  latencyMs: number;
  requests: ResendRequest[];
  /** Requests whose e-mail mentions `marker` (e.g. a feedback id). */
  about(marker: string): ResendRequest[];
  /** E-mails actually sent (accepted, not replays) that mention `marker`. */
  sentAbout(marker: string): ResendRequest[];
  stop(): Promise<void>;
}

async function readJson(request: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

export async function startResendStandIn(): Promise<ResendStandIn> {
  const accepted = new Map<string, string>();
  let nextId = 1;
  const standIn = {
    mode: 'up' as ResendMode,
    latencyMs: 0,
    requests: [] as ResendRequest[],
  };

  const server = createServer(async (request, response) => {
    const send = (status: number, body: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    if (request.method !== 'POST' || request.url !== '/emails') {
      return send(404, { statusCode: 404, name: 'not_found', message: 'The requested endpoint does not exist.' });
    }
    const body = (await readJson(request)) as ResendRequest['body'];
    if (standIn.latencyMs > 0) await new Promise((resolve) => setTimeout(resolve, standIn.latencyMs));
    const header = (name: string) => {
      const value = request.headers[name];
      return typeof value === 'string' ? value : undefined;
    };
    const record = (status: number, replayed = false) =>
      standIn.requests.push({
        authorization: header('authorization'),
        userAgent: header('user-agent'),
        idempotencyKey: header('idempotency-key'),
        body,
        status,
        replayed,
      });

    if (standIn.mode === 'down') {
      record(503);
      return send(503, { statusCode: 503, name: 'application_error', message: 'Service unavailable' });
    }
    if (standIn.mode === 'refuse') {
      record(422);
      return send(422, { statusCode: 422, name: 'validation_error', message: 'Invalid `from` field.' });
    }
    const key = header('idempotency-key');
    const earlier = key === undefined ? undefined : accepted.get(key);
    if (earlier) {
      record(200, true);
      return send(200, { id: earlier });
    }
    const id = `stand-in-${nextId++}`;
    if (key !== undefined) accepted.set(key, id);
    record(200);
    return send(200, { id });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));

  const mentions = (marker: string) => (request: ResendRequest) =>
    request.body.text.includes(marker) || request.body.html.includes(marker);
  return Object.assign(standIn, {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    about: (marker: string) => standIn.requests.filter(mentions(marker)),
    sentAbout: (marker: string) => standIn.requests.filter((r) => r.status === 200 && !r.replayed && mentions(marker)(r)),
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}
