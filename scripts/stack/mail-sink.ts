import type { EventEmitter } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import PostalMime from 'postal-mime';
import { SMTPServer } from 'smtp-server';

// A real SMTP server on loopback that keeps every message it receives, and a
// small HTTP API to read them: GET /messages, GET /messages/:id, DELETE /messages.

export interface StoredMessage {
  id: number;
  receivedAt: string;
  from: string;
  to: string[];
  subject: string;
  text: string;
  html: string;
}

export interface MailSink {
  smtpPort: number;
  apiUrl: string;
  messages: StoredMessage[];
  stop(): Promise<void>;
}

/** Rejects when the port is taken (EADDRINUSE): an 'error' event nobody listens to would end the process with a stack trace. */
function listen(server: EventEmitter & { listen(port: number, host: string, cb: () => void): unknown }, port = 0): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
}

export async function startMailSink({ smtpPort = 0, apiPort = 0 } = {}): Promise<MailSink> {
  const messages: StoredMessage[] = [];
  let nextId = 1;

  const smtp = new SMTPServer({
    secure: false,
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    size: 30 * 1024 * 1024,
    async onData(stream, session, callback) {
      try {
        const chunks: Buffer[] = [];
        for await (const chunk of stream) chunks.push(chunk as Buffer);
        const parsed = await PostalMime.parse(Buffer.concat(chunks));
        messages.push({
          id: nextId++,
          receivedAt: new Date().toISOString(),
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((rcpt) => rcpt.address),
          subject: parsed.subject ?? '',
          text: parsed.text ?? '',
          html: parsed.html ?? '',
        });
        callback();
      } catch (error) {
        callback(error as Error);
      }
    },
  });
  // SMTPServer re-emits its socket server's errors as its own.
  await listen(smtp, smtpPort);

  const api: Server = createServer((request, response) => {
    const url = new URL(request.url ?? '/', 'http://sink');
    const send = (status: number, body: unknown) => {
      response.writeHead(status, { 'content-type': 'application/json' });
      response.end(JSON.stringify(body));
    };
    if (request.method === 'DELETE' && url.pathname === '/messages') {
      messages.length = 0;
      return send(200, { deleted: true });
    }
    if (request.method === 'GET' && url.pathname === '/messages') return send(200, messages);
    const match = /^\/messages\/(\d+)$/.exec(url.pathname);
    const found = match && messages.find((message) => message.id === Number(match[1]));
    if (request.method === 'GET' && found) return send(200, found);
    return send(404, { error: 'not found' });
  });
  await listen(api, apiPort);

  return {
    smtpPort: (smtp.server.address() as AddressInfo).port,
    apiUrl: `http://127.0.0.1:${(api.address() as AddressInfo).port}`,
    messages,
    stop: async () => {
      await new Promise<void>((resolve) => smtp.close(() => resolve()));
      await new Promise<void>((resolve) => api.close(() => resolve()));
    },
  };
}
