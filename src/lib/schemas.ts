import { z } from 'zod';

// Schema fragments shared by the route modules: required strings, e-mail,
// password and name, text and JSON Postgres can store, the message-only
// response, list pagination.

/**
 * A string field whose every refusal names it: absence, wrong type, and the
 * length checks chained on it without a message of their own (the schema's
 * message would otherwise stand for all of them: an empty token was
 * "Token must be a string").
 */
export const requiredString = (label: string) =>
  z.string({
    // zod types this map for the type check alone, but it answers for the length checks too.
    error: (typeIssue) => {
      const issue = typeIssue as { code: string; input?: unknown; minimum?: unknown; maximum?: unknown };
      if (issue.input === undefined) return `${label} is required`;
      if (issue.code === 'too_small') return issue.minimum === 1 ? `${label} is required` : `${label} must be at least ${issue.minimum} characters`;
      if (issue.code === 'too_big') return `${label} must be at most ${issue.maximum} characters`;
      return `${label} must be a string`;
    },
  });

/**
 * The auth server also refuses a domain label over 63 characters or ending in
 * `-`, which zod's pattern lets through; refused here, such an address is a
 * validation error rather than the auth server's refusal.
 */
const DOMAIN_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const hasValidDomainLabels = (email: string) => email.slice(email.lastIndexOf('@') + 1).split('.').every((label) => DOMAIN_LABEL.test(label));

export const EmailSchema = requiredString('Email')
  .trim()
  .toLowerCase()
  .pipe(z.email({ error: 'Invalid email format', abort: true }).max(254).refine(hasValidDomainLabels, { error: 'Invalid email format' }));
export const PasswordSchema = requiredString('Password')
  .min(6, { error: 'Password must be at least 6 characters' })
  // bcrypt, which the auth server uses, reads at most 72 bytes.
  .refine((value) => Buffer.byteLength(value) <= 72, { error: 'Password must be at most 72 bytes' });
export const NameSchema = requiredString('Name')
  .trim()
  .min(2, { error: 'Name must be at least 2 characters' })
  .max(100, { error: 'Name must be at most 100 characters' });

/** A success that carries only a message. */
export const MessageResponseSchema = z.object({ success: z.literal(true), message: z.string() });

/** `limit` of a list query: an integer from 1 to `max`, `fallback` when absent. */
export function limitSchema(max: number, fallback: number) {
  const message = `Limit must be an integer from 1 to ${max}`;
  return z.coerce.number({ error: message }).int(message).min(1, message).max(max, message).default(fallback);
}

const OFFSET_MESSAGE = 'Offset must be a non-negative integer';

/** `offset` of a list query; bounded so a huge offset cannot make Postgres walk millions of rows. */
export const OffsetSchema = z.coerce
  .number({ error: OFFSET_MESSAGE })
  .int(OFFSET_MESSAGE)
  .min(0, OFFSET_MESSAGE)
  .max(1_000_000, 'Offset must be at most 1000000')
  .default(0);

/** limit (default 20, at most 100) and offset (default 0). */
export const PaginationQuerySchema = z.object({ limit: limitSchema(100, 20), offset: OffsetSchema });
export type PaginationQuery = z.infer<typeof PaginationQuerySchema>;

/** `pagination` of a list response. */
export const PaginationSchema = z.object({ total: z.number().int(), limit: z.number().int(), offset: z.number().int() });

// Postgres text cannot hold NUL, and jsonb refuses \u0000 and unpaired
// surrogates; JSON.stringify writes exactly those as escapes.
const UNSTORABLE_JSON_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f])/i;

/** Text Postgres can store: no NUL characters, no unpaired surrogates. */
export const isStorableText = (value: string) => value.isWellFormed() && !value.includes('\u0000');

/** `value` made storable: NUL characters dropped, unpaired surrogates (a cut emoji) replaced. */
export const storableText = (value: string) => value.toWellFormed().replaceAll('\u0000', '');

/** Does JSON text (as JSON.stringify writes it) hold an escape that jsonb refuses? */
export const hasUnstorableEscape = (json: string) => UNSTORABLE_JSON_ESCAPE.test(json);

/** A JSON object (string keys, any values) whose serialised form stays under `maxBytes`. */
export function boundedJsonObject(label: string, maxBytes: number) {
  return z
    .record(z.string().max(100, `${label} keys must be at most 100 characters`), z.unknown(), {
      error: `${label} must be a JSON object`,
    })
    .superRefine((value, context) => {
      const json = JSON.stringify(value);
      if (Buffer.byteLength(json) > maxBytes) context.addIssue({ code: 'custom', message: `${label} must be at most ${maxBytes} bytes as JSON` });
      else if (hasUnstorableEscape(json)) {
        context.addIssue({ code: 'custom', message: `${label} must not contain NUL characters or unpaired surrogates` });
      }
    });
}
