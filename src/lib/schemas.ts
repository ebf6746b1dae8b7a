import { z } from 'zod';

// Schema fragments shared by the route modules: required strings, e-mail,
// password and name, text and JSON Postgres can store, the message-only
// response, list pagination.

/**
 * A JSON body that is not an object (`[]`, `"x"`, `3`) was refused with zod's
 * own `Invalid input: expected object, received array`, where every other
 * message reads `<Field> must be …`. Such an issue is the only one with no path
 * that expects an object (a query, path or headers always reach the check
 * as one): the whole body is wrong, and the details file it under `body`.
 * Process-wide, and only where a schema gives no message of its own.
 */
export const BODY_NOT_AN_OBJECT = 'Request body must be a JSON object';
z.config({
  customError: (issue) =>
    issue.code === 'invalid_type' && issue.expected === 'object' && (issue.path ?? []).length === 0 ? BODY_NOT_AN_OBJECT : undefined,
});

/**
 * A string field whose every refusal names it: absence, wrong type, and the
 * length checks chained on it without a message of their own (the schema's
 * message would otherwise stand for all of them: an empty token was
 * "Token must be a string"). A value of the wrong type gets that one message:
 * zod still runs length checks on anything with a length (`["a"]` was also
 * "Name must be at least 2 characters"), so the parse ends at the type issue.
 */
export const requiredString = (label: string) =>
  z
    .string({
      // zod types this map for the type check alone, but it answers for the length checks too.
      error: (typeIssue) => {
        const issue = typeIssue as { code: string; input?: unknown; minimum?: unknown; maximum?: unknown };
        if (issue.input === undefined) return `${label} is required`;
        if (issue.code === 'too_small') return issue.minimum === 1 ? `${label} is required` : `${label} must be at least ${issue.minimum} characters`;
        if (issue.code === 'too_big') return `${label} must be at most ${issue.maximum} characters`;
        return `${label} must be a string`;
      },
    })
    .superRefine(endParse, { when: isNotString });

/** Runs only on a value the type check refused (`when`); checks with a `when` of their own are skipped after it. */
function endParse(_value: string, payload: z.core.ParsePayload) {
  payload.aborted = true;
}
const isNotString = (payload: z.core.ParsePayload) => typeof payload.value !== 'string';

const UUID_TEXT = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Is `value` a UUID in its canonical text form (either case), which PostgreSQL's uuid cast takes? */
export const isUuidText = (value: unknown): value is string => typeof value === 'string' && UUID_TEXT.test(value);

/**
 * A UUID a client sends (path, query or body), lower-cased. Postgres reads
 * either case as the same uuid, but the id is also compared as text (is it
 * the caller's own?), echoed back and used as a lock key. Written in the
 * OpenAPI document as `format: uuid` all the same.
 */
export const uuidInput = (label: string) =>
  z.uuid({ error: (issue) => (issue.input === undefined ? `${label} is required` : `${label} must be a UUID`) }).toLowerCase();

/**
 * The document's form of a string trimmed before it is checked. JSON Schema
 * has no trim: its minLength and maxLength read the value as sent, while the
 * server reads it trimmed, so the description says which, and the pattern
 * refuses what the trim would leave empty (`\s` matches what trim
 * removes). `limits` is the rule in words, such as `2 to 100 characters`.
 */
export const trimmedText = (limits: string, more?: string) => ({
  pattern: String.raw`\S`,
  description: `Trimmed of leading and trailing white space first; ${limits} after that${more ? `. ${more}` : ''}`,
});

/** Text Postgres can store: no NUL characters, no unpaired surrogates. */
export const isStorableText = (value: string) => value.isWellFormed() && !value.includes('\u0000');

/**
 * The one e-mail rule of every route that takes an address (SPEC: "valid
 * e-mail (RFC 5322)"): an RFC 5322 dot-atom of atext (letters, digits and
 * ! # $ % & ' * + / = ? ^ _ ` { | } ~ -) of at most 64 characters, `@`, and a
 * domain of letter-digit-hyphen labels (at most 63 characters, no `-` at either
 * end) whose last label is letters or an `xn--` (IDNA) label; at most 254
 * characters in all. Narrower than RFC 5322 on purpose: quoted local parts,
 * comments, IP literals and non-ASCII text (RFC 6532) are refused, as the auth
 * server (v2.196.0, tried) refuses every one of them, and mail providers
 * refuse or mishandle them. What it accepts, the auth server accepts too.
 */
const ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+";
const DOMAIN_LABEL = '[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?';
const TOP_LEVEL_LABEL = '(?:[A-Za-z]{2,63}|[Xx][Nn]--[A-Za-z0-9-]{0,58}[A-Za-z0-9])';
const EMAIL_ADDRESS_SOURCE = String.raw`(?=[^@]{1,64}@)${ATEXT}(?:\.${ATEXT})*@(?:${DOMAIN_LABEL}\.)+${TOP_LEVEL_LABEL}`;
export const EMAIL_ADDRESS = new RegExp(`^${EMAIL_ADDRESS_SOURCE}$`);

/**
 * An address as typed, made comparable: trimmed, then NFC, so the composed and
 * decomposed spellings of one address (`é` and `e` + U+0301) are one text
 * wherever an address is stored or looked up. The feedback sender filter,
 * which must find rows stored under older rules, takes this alone.
 */
export const emailText = () => requiredString('Email').trim().normalize('NFC');

/**
 * An address checked by the rule above, case kept (feedback stores it as
 * typed). The length is checked before NFC, which then never walks an
 * oversized string (nor the pattern): NFC makes no ASCII text longer, and
 * anything it lengthens is non-ASCII, which the pattern refuses.
 */
export const emailAddress = () =>
  requiredString('Email')
    .trim()
    .max(254, { error: 'Invalid email format', abort: true })
    // Named as every other field's unstorable text is, before the pattern says only "Invalid".
    .refine(isStorableText, { error: 'Email must not contain NUL characters or unpaired surrogates', abort: true })
    .normalize('NFC')
    .regex(EMAIL_ADDRESS, { error: 'Invalid email format' });

/**
 * The rule in the document. Every address it accepts is a JSON Schema `email`
 * (RFC 5321 Mailbox); the pattern says the rest, with room for the white space
 * the trim removes.
 */
export const emailAddressDocument = (more?: string) => ({
  format: 'email',
  maxLength: 254,
  pattern: String.raw`^\s*${EMAIL_ADDRESS_SOURCE}\s*$`,
  description:
    'Trimmed first; then at most 254 characters: dot-separated atoms of letters, digits and ' +
    "! # $ % & ' * + / = ? ^ _ ` { | } ~ - (at most 64 characters before the @), then a domain name of labels of letters, digits " +
    'and inner hyphens (each at most 63 characters), its last label letters or an `xn--` label. No quoted local parts, IP literals ' +
    `or non-ASCII text${more ? `. ${more}` : ''}`,
});

export const EmailSchema = emailAddress()
  .toLowerCase()
  .meta(emailAddressDocument('Lower-cased after the check'));
export const PasswordSchema = requiredString('Password')
  .min(6, { error: 'Password must be at least 6 characters' })
  // bcrypt, which the auth server uses, reads at most 72 bytes.
  .refine((value) => Buffer.byteLength(value) <= 72, { error: 'Password must be at most 72 bytes' })
  // JSON Schema counts characters; 72 bytes are at most 72 of them.
  .meta({ maxLength: 72, description: 'At least 6 characters and at most 72 bytes as UTF-8 (bcrypt reads no further)' });
export const NameSchema = requiredString('Name')
  .trim()
  .min(2, { error: 'Name must be at least 2 characters' })
  .max(100, { error: 'Name must be at most 100 characters' })
  .meta(trimmedText('2 to 100 characters'));

/** A success that carries only a message. */
export const MessageResponseSchema = z.object({ success: z.literal(true), message: z.string() });

const DIGITS = /^[0-9]+$/;

/**
 * A whole number in a query string, written in decimal digits only: `1e1`,
 * `0x10`, `5.0` and ` 5` are refused with `message`, where Number() would have
 * read them as 10, 16, 5 and 5. The document shows an integer (the string side
 * of the pipe is what arrives, not what it means).
 */
function queryInteger(message: string, min: number, max: number, maxMessage = message) {
  return z
    .string({ error: message })
    .refine((text) => DIGITS.test(text), { error: message, abort: true })
    // Digits past any safe integer are over the max too, and said so: read as a
    // number first, 9223372036854775807 was "not an integer" while 9007199254740991 was over the max.
    .refine((text) => text.replace(/^0+(?=.)/, '').length <= String(max).length, { error: maxMessage, abort: true })
    .pipe(z.coerce.number<string>().int({ error: message, abort: true }).min(min, message).max(max, maxMessage))
    .meta({ type: 'integer', minimum: min, maximum: max });
}

/** `limit` of a list query: an integer from 1 to `max`, `fallback` when absent. */
export function limitSchema(max: number, fallback: number) {
  const message = `Limit must be an integer from 1 to ${max}`;
  return queryInteger(message, 1, max).default(fallback);
}

const MAX_OFFSET = 1_000_000;

/** `offset` of a list query; bounded so a huge offset cannot make Postgres walk millions of rows. */
export const OffsetSchema = queryInteger('Offset must be a non-negative integer', 0, MAX_OFFSET, `Offset must be at most ${MAX_OFFSET}`)
  .default(0);

/** limit (default 20, at most 100) and offset (default 0). */
export const PaginationQuerySchema = z.object({ limit: limitSchema(100, 20), offset: OffsetSchema });
export type PaginationQuery = z.infer<typeof PaginationQuerySchema>;

/** `pagination` of a list response. */
export const PaginationSchema = z.object({ total: z.number().int(), limit: z.number().int(), offset: z.number().int() });

// Postgres text cannot hold NUL, and jsonb refuses \u0000 and unpaired
// surrogates; JSON.stringify writes exactly those as escapes.
const UNSTORABLE_JSON_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f])/i;

/** `value` made storable: NUL characters dropped, unpaired surrogates (a cut emoji) replaced. */
export const storableText = (value: string) => value.toWellFormed().replaceAll('\u0000', '');

/** Does JSON text (as JSON.stringify writes it) hold an escape that jsonb refuses? */
export const hasUnstorableEscape = (json: string) => UNSTORABLE_JSON_ESCAPE.test(json);

const JSON_KEY_MAX_LENGTH = 100;

/**
 * Counted in characters (code points), as zod's max and Postgres' char_length
 * count every other limit: 100 emoji are 200 UTF-16 units. A key within the
 * limit in units is within it in code points, so most keys are never spread.
 */
const isOverlongKey = (key: string) => key.length > JSON_KEY_MAX_LENGTH && [...key].length > JSON_KEY_MAX_LENGTH;

/**
 * Does `value` (serialised as `json`) hold a number JSON cannot write? JSON.parse
 * reads 1e400 as Infinity, which JSON.stringify writes, and jsonb so stores, as
 * null. Only text with a null can hide one, so most objects are not walked again.
 */
function holdsNonFiniteNumber(value: unknown, json: string): boolean {
  if (!json.includes('null')) return false;
  let found = false;
  JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === 'number' && !Number.isFinite(item)) found = true;
    return item;
  });
  return found;
}

/**
 * A JSON object (string keys, any values) whose serialised form stays under
 * `maxBytes`. Each refusal is one message on the field itself, and ends the
 * parse: checks chained after this one read an object that is storable.
 */
export function boundedJsonObject(label: string, maxBytes: number) {
  return z.record(z.string(), z.unknown(), { error: `${label} must be a JSON object` }).superRefine((value, context) => {
    const refuse = (message: string) => context.addIssue({ code: 'custom', message, continue: false });
    // Checked here rather than by the record's key schema: the record's own message would stand for it.
    if (Object.keys(value).some(isOverlongKey)) {
      refuse(`${label} keys must be at most ${JSON_KEY_MAX_LENGTH} characters`);
      return;
    }
    const json = JSON.stringify(value);
    if (holdsNonFiniteNumber(value, json)) refuse(`${label} must not contain numbers too large to store (such as 1e400)`);
    else if (Buffer.byteLength(json) > maxBytes) refuse(`${label} must be at most ${maxBytes} bytes as JSON`);
    else if (hasUnstorableEscape(json)) refuse(`${label} must not contain NUL characters or unpaired surrogates`);
  })
    // The checks above have no JSON Schema form: the document says them in words.
    .meta({ description: `At most ${maxBytes} bytes as JSON; keys at most ${JSON_KEY_MAX_LENGTH} characters` });
}
