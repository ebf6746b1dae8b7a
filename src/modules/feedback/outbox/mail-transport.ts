import { createTransport } from 'nodemailer';
import { Resend } from 'resend';
import type { Config } from '../../../config.ts';

// How notification e-mails leave: Resend when RESEND_API_KEY is set
// (production), else SMTP at SMTP_URL (the local sink in development), else
// nowhere, and the outbox keeps them until a transport is configured.

export const SEND_TIMEOUT_MS = 10_000;
const RESEND_DEFAULT_BASE_URL = 'https://api.resend.com';

export interface OutgoingMail {
  from: string;
  to: string[];
  subject: string;
  html: string;
  text: string;
}

/** A failed send; `permanent` when sending the same message again cannot succeed. */
export class DeliveryError extends Error {
  readonly permanent: boolean;

  constructor(message: string, permanent: boolean) {
    super(message);
    this.permanent = permanent;
  }
}

export interface MailTransport {
  readonly name: 'resend' | 'smtp';
  /** Sends the outbox worker may have in flight at once. */
  readonly concurrency: number;
  /** Sends once; the key lets the provider drop a repeat of the same message. */
  send(mail: OutgoingMail, idempotencyKey: string): Promise<{ providerMessageId?: string }>;
  close(): void;
}

/** Addresses Resend takes in one e-mail (`to`). */
export const RESEND_MAX_RECIPIENTS = 50;

function chunks<T>(items: T[], size: number): T[][] {
  const parts: T[][] = [];
  for (let start = 0; start < items.length; start += size) parts.push(items.slice(start, start + size));
  return parts;
}

function resendTransport(apiKey: string, baseUrl: string | undefined): MailTransport {
  // Base URL and user agent are passed so the package never falls back to
  // reading the environment (config is parsed once, in config.ts).
  const resend = new Resend(apiKey, { baseUrl: baseUrl ?? RESEND_DEFAULT_BASE_URL, userAgent: 'portfolio-backend' });
  return {
    name: 'resend',
    // Resend's API allows 2 requests per second by default; more would only earn 429s and retries.
    concurrency: 2,
    async send(mail, idempotencyKey) {
      // Resend refuses (422) an e-mail to more than 50 addresses, and a refusal is
      // given up at once: with 51 admins no notification reached anyone. So the
      // list is sent in parts, one after another, each with a key of its own.
      // A retry after a part failed sends the same parts with the same keys, and
      // Resend drops those it already took. One deadline for all the parts: the
      // claim's lease counts one send timeout per notification (worker.ts).
      const parts = mail.to.length > RESEND_MAX_RECIPIENTS ? chunks(mail.to, RESEND_MAX_RECIPIENTS) : [mail.to];
      const signal = AbortSignal.timeout(SEND_TIMEOUT_MS);
      const ids: string[] = [];
      for (const [index, to] of parts.entries()) {
        const { data, error } = await resend.emails.send(
          { from: mail.from, to, subject: mail.subject, html: mail.html, text: mail.text },
          { idempotencyKey: parts.length === 1 ? idempotencyKey : `${idempotencyKey}-${index + 1}`, signal },
        );
        if (error) {
          // 400 and 422: the message itself is refused. Everything else (no
          // answer, 401/403 keys, 409 a concurrent request, 429, 5xx) may pass later.
          const status = error.statusCode ?? null;
          throw new DeliveryError(`resend ${status ?? 'unreachable'}: ${error.name}: ${error.message}`, status === 400 || status === 422);
        }
        if (data?.id) ids.push(data.id);
      }
      return { providerMessageId: ids.length > 0 ? ids.join(',') : undefined };
    },
    close() {},
  };
}

/** SMTP connections kept open and used at once. */
const SMTP_POOL_SIZE = 5;

function smtpTransport(url: string): MailTransport {
  const transporter = createTransport({
    url,
    // One connection per message was the bottleneck (a TCP and SMTP handshake each);
    // a pool keeps a few open and reuses them.
    pool: true,
    maxConnections: SMTP_POOL_SIZE,
    maxMessages: Infinity,
    connectionTimeout: SEND_TIMEOUT_MS,
    greetingTimeout: SEND_TIMEOUT_MS,
    socketTimeout: SEND_TIMEOUT_MS,
  });
  return {
    name: 'smtp',
    concurrency: SMTP_POOL_SIZE,
    async send(mail, idempotencyKey) {
      try {
        // SMTP has no idempotency; a stable Message-ID lets mail systems drop repeats.
        const info = await transporter.sendMail({ ...mail, messageId: `<${idempotencyKey}@portfolio-backend>` });
        return { providerMessageId: info.messageId };
      } catch (error) {
        const code = (error as { responseCode?: unknown }).responseCode;
        // 5xx replies are final; 4xx and connection failures are worth retrying.
        throw new DeliveryError(`smtp: ${(error as Error).message}`, typeof code === 'number' && code >= 500);
      }
    },
    close: () => transporter.close(),
  };
}

export function createMailTransport(config: Config): MailTransport | undefined {
  if (config.RESEND_API_KEY) return resendTransport(config.RESEND_API_KEY, config.RESEND_BASE_URL);
  if (config.SMTP_URL) return smtpTransport(config.SMTP_URL);
  return undefined;
}
