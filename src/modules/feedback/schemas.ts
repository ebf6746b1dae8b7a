import { z } from 'zod';
import { documentedAs } from '../../lib/documented-as.ts';
import {
  emailText,
  isStorableText,
  limitSchema,
  OffsetSchema,
  PaginationSchema,
  requiredString,
  trimmedText,
  uuidInput,
} from '../../lib/schemas.ts';
import { MAX_SCREENSHOT_CHARS, SCREENSHOT_MESSAGES, SCREENSHOT_TYPES, screenshotProblem } from './screenshot.ts';

// Request and response shapes of the feedback routes (SPEC sections 2, 4, 7).
// Limits apply to the text as typed; it is HTML-escaped afterwards. Text that
// Postgres cannot store (an unpaired surrogate would be written as U+FFFD) is
// refused by name rather than changed.

export const FEEDBACK_STATUSES = ['pending', 'resolved', 'archived'] as const;
export const FEEDBACK_CATEGORIES = ['Bug Report', 'Feature Request', 'General Feedback'] as const;

/** By creation time: newest first (the default) or oldest first. */
export const FEEDBACK_ORDERS = ['desc', 'asc'] as const;

export const FeedbackStatusSchema = z.enum(FEEDBACK_STATUSES, { error: `Status must be one of: ${FEEDBACK_STATUSES.join(', ')}` });

const unstorable = (label: string) => `${label} must not contain NUL characters or unpaired surrogates`;

/** A required, storable string whose missing and wrong-type errors name the field. */
const text = (label: string) =>
  requiredString(label)
    .trim()
    .refine(isStorableText, unstorable(label));

/**
 * An optional field of the public form. null or an empty string is no value:
 * forms and their JSON encoders send an empty field so, and a visitor should
 * not be refused for a field they left blank. A value that is there is checked.
 */
const formOptional = <T extends z.ZodType>(schema: T) =>
  z.preprocess((value) => (value === null || value === '' ? undefined : value), schema.optional());

/**
 * An addr-spec of RFC 5322: a local part of atoms joined by dots, or one
 * quoted string (its quotes and backslashes escaped), then a domain name or
 * an IPv4 literal. zod's RFC 5322 pattern, which this narrows, let control
 * characters into an atom and any character, a bare `"` included, between
 * the quotes. Non-ASCII letters stay allowed in atoms (RFC 6532), and the
 * last label may be an IDNA `xn--` label (`.xn--p1ai`, the A-label of `.рф`).
 * Broader than the account routes' rule (lib/schemas.ts): this address only
 * gets a reply from an admin, no auth server has to take it.
 */
const ATOM = String.raw`[^<>()\[\]\\.,;:\s@"\u0000-\u001f\u007f]+`;
const QUOTED_STRING = String.raw`"(?:[^"\\\u0000-\u001f\u007f]|\\[\u0020-\u007e])+"`;
const DOMAIN = String.raw`(?:\[\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\]|(?:[a-zA-Z0-9-]+\.)+(?:[a-zA-Z]{2,}|[Xx][Nn]--[a-zA-Z0-9-]+))`;
export const SUBMITTER_EMAIL = new RegExp(String.raw`^(?:${ATOM}(?:\.${ATOM})*|${QUOTED_STRING})@${DOMAIN}$`);

// The SPEC's "all text inputs are HTML-escaped", said where a client generated
// from the document looks: without it a front end showed `&amp;` as text and
// sent it inside a link (docs/feedback.md, "What a front end should know").

/** On each text field a submission or an update stores. */
const STORED_ESCAPED = 'Stored HTML-escaped, and read back so (`&amp;`, `&lt;`, `&gt;`, `&quot;`, `&#39;`)';

/** On each text field of a feedback item. */
const RETURNED_ESCAPED =
  'HTML-escaped: `& < > " \'` come as `&amp; &lt; &gt; &quot; &#39;`. Safe to put into HTML as it is; decode those five ' +
  'before showing it as text (React, Vue and the like escape it again) or using it as a link, and never escape it again. ' +
  'The CSV export (GET /api/feedback/export) is already decoded';

// The required fields of the public form.
const submitted = {
  name: text('Name')
    .min(2, 'Name must be at least 2 characters')
    .max(100, 'Name must be at most 100 characters')
    .meta(trimmedText('2 to 100 characters', STORED_ESCAPED)),
  // Length before the pattern: the pattern's backtracking overflowed the stack
  // on an address of some 4.8 million characters, which this route's body
  // limit (room for a screenshot) lets through, and the request was a 500.
  email: text('Email')
    .max(254, 'Invalid email format')
    // One spelling of a non-ASCII address (NFC), as the sender filter looks it up.
    .normalize('NFC')
    .pipe(z.email({ pattern: SUBMITTER_EMAIL, error: 'Invalid email format' }))
    // The document shows a pipe's input side, a plain string: say what the output side checks,
    // SUBMITTER_EMAIL with room for the white space the trim removes. `idn-email`, as letters of
    // any script are allowed (validators' `email` refuses them, and quoted local parts too).
    .meta({
      format: 'idn-email',
      maxLength: 254,
      pattern: String.raw`^\s*${SUBMITTER_EMAIL.source.slice(1, -1)}\s*$`,
      description:
        'Trimmed first; then at most 254 characters: an address of dot-separated atoms (letters of any script allowed) ' +
        'or one quoted string, then @ and a domain name whose last label is 2 or more letters or an `xn--` label, or an IPv4 literal in brackets. Put in NFC; not lower-cased. ' +
        STORED_ESCAPED,
    }),
  comment: text('Comment')
    .min(10, 'Comment must be at least 10 characters')
    .max(5000, 'Comment must be at most 5000 characters')
    .meta(trimmedText('10 to 5000 characters', STORED_ESCAPED)),
  rating: z
    .number({ error: (issue) => (issue.input === undefined ? 'Rating is required' : 'Rating must be an integer from 1 to 5') })
    .int('Rating must be an integer from 1 to 5')
    .min(1, 'Rating must be an integer from 1 to 5')
    .max(5, 'Rating must be an integer from 1 to 5'),
};

// The optional fields of the public form, as checked when they hold a value.
const given = {
  location: z
    .string({ error: 'Location must be an http(s) URL' })
    // Length before the URL is parsed: parsing 7 MB of it took 185 ms.
    .max(2048, 'Location must be at most 2048 characters')
    .pipe(z.url({ protocol: /^https?$/, error: 'Location must be an http(s) URL' }))
    .refine(isStorableText, unstorable('Location'))
    .meta({
      format: 'uri',
      maxLength: 2048,
      // z.url trims, then asks for http:// or https:// (either case) before it parses the rest as a URL.
      pattern: String.raw`^\s*[Hh][Tt][Tt][Pp][Ss]?://`,
      description:
        'The http(s) URL of the page the feedback is about: http:// or https://, then a URL a browser can parse (white space around it is trimmed). ' +
        `${STORED_ESCAPED}: a link needs it decoded`,
    }),
  category: z.enum(FEEDBACK_CATEGORIES, { error: `Category must be one of: ${FEEDBACK_CATEGORIES.join(', ')}` }),
  screenshot: z
    .string({ error: SCREENSHOT_MESSAGES.format })
    // One check, length first: a regular expression never walks an oversized string.
    .superRefine((value, context) => {
      const problem = screenshotProblem(value);
      if (problem) context.addIssue({ code: 'custom', message: SCREENSHOT_MESSAGES[problem] });
    })
    .meta({
      maxLength: MAX_SCREENSHOT_CHARS,
      // screenshotProblem's data URL, its types and its whole groups of base64 in one pattern.
      pattern: String.raw`^data:image/(?:${SCREENSHOT_TYPES.map((type) => type.slice('image/'.length)).join('|')});base64,(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)$`,
      description: "A base64 data URL of a PNG, JPEG, GIF, WebP or AVIF image, at most 5 MiB decoded, whose bytes begin as that type's files do (SVG is refused)",
    }),
  websiteId: uuidInput('Website id'),
  captchaToken: z
    .string({ error: 'Captcha token must be a string' })
    .max(4096, 'Captcha token must be at most 4096 characters')
    .meta({
      description:
        "The captcha widget's answer (Cloudflare Turnstile or hCaptcha). Required when the server has a captcha secret: " +
        'without it, or with a wrong one, 400 `Bot verification failed`; 503 `Bot verification unavailable` when the provider does not answer',
    }),
};

/** formOptional in the document: the value, an empty string or null (the last two taken as not given). */
const blankOr = <T extends z.ZodType>(schema: T) =>
  z
    .union([schema, z.literal(''), z.null()])
    // Said on the field itself, where generated clients look, rather than inside its first branch.
    .meta({ description: [schema.description, 'An empty string or null is taken as not given'].filter(Boolean).join('. ') })
    .optional();

/** Public submission body; `captchaToken` is the bot-check answer when a captcha is configured. */
export const SubmitFeedbackBodySchema = documentedAs(
  z.object({
    ...submitted,
    location: formOptional(given.location),
    category: formOptional(given.category),
    screenshot: formOptional(given.screenshot),
    websiteId: formOptional(given.websiteId),
    captchaToken: formOptional(given.captchaToken),
  }),
  z.object({
    ...submitted,
    location: blankOr(given.location),
    category: blankOr(given.category),
    screenshot: blankOr(given.screenshot),
    websiteId: blankOr(given.websiteId),
    captchaToken: blankOr(given.captchaToken),
  }),
);
export type SubmitFeedbackBody = z.infer<typeof SubmitFeedbackBodySchema>;

/**
 * The submission's optional Idempotency-Key (IETF draft-ietf-httpapi-idempotency-key-header):
 * 1 to 255 visible ASCII characters, chosen by the client, a UUID for instance.
 */
export const SubmitFeedbackHeadersSchema = z.object({
  'idempotency-key': z
    .string()
    .regex(/^[\x21-\x7e]{1,255}$/, 'Idempotency-Key must be 1 to 255 visible ASCII characters')
    .optional()
    .meta({
      description:
        'Optional. The same key and the same body from the same client within 24 hours get the first answer again ' +
        '(with `Idempotent-Replayed: true`) instead of storing the feedback twice; the same key with another body 422; ' +
        'while the first request with the key is still in progress, 409. A new key (a UUID) for each new submission.',
    }),
});

export const SubmitFeedbackResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({ id: z.uuid(), status: FeedbackStatusSchema }),
});

/**
 * The sender's address as typed, to compare with the stored one whatever the
 * case, in NFC as a submission stores it (emailText). Not checked as an
 * address: an admin looking for a person's items should find a row submitted
 * before today's rules (a quoted local part, non-ASCII letters), not be
 * refused. White space alone is refused rather than read as no filter;
 * `?email=` with no value at all is not given, as with every key (README,
 * "Query strings").
 */
const SenderEmailFilterSchema = emailText()
  .min(1, 'Email must not be empty')
  .max(254, 'Email must be at most 254 characters')
  .refine(isStorableText, unstorable('Email'))
  .meta(trimmedText('1 to 254 characters', "Matches the sender's address as submitted, in any case"));

export const ListFeedbackQuerySchema = z.object({
  status: FeedbackStatusSchema.optional(),
  // Not in the SPEC: narrows the list to one website's feedback.
  websiteId: uuidInput('Website id').optional(),
  // Not in the SPEC: every item of one sender, for an erasure request (docs/feedback.md).
  email: SenderEmailFilterSchema.optional(),
  // Not in the SPEC: `asc` for triage, oldest first.
  order: z.enum(FEEDBACK_ORDERS, { error: 'Order must be desc (newest first) or asc (oldest first)' }).default('desc'),
  limit: limitSchema(100, 20),
  offset: OffsetSchema,
});
export type ListFeedbackQuery = z.infer<typeof ListFeedbackQuerySchema>;

/** The list's filters and order; an export has every matching row, so no paging. */
export const ExportFeedbackQuerySchema = ListFeedbackQuerySchema.pick({ status: true, websiteId: true, email: true, order: true });
export type ExportFeedbackQuery = z.infer<typeof ExportFeedbackQuerySchema>;

export const CsvResponseSchema = z.string().describe('text/csv; a header line, then one line per row');

const timestamp = z.iso.datetime();

/** A feedback record as admins see it: every field, null where unset. */
export const FeedbackSchema = z.object({
  id: z.uuid(),
  name: z.string().describe(RETURNED_ESCAPED),
  email: z.string().describe(RETURNED_ESCAPED),
  comment: z.string().describe(RETURNED_ESCAPED),
  // As submitted (and as the table's checks hold them).
  rating: z.number().int().min(1).max(5),
  status: FeedbackStatusSchema,
  location: z.string().nullable().describe(RETURNED_ESCAPED),
  // Typed as text for the queries that read it; the document lists its values.
  category: z.string().nullable().meta({ enum: [...FEEDBACK_CATEGORIES, null] }),
  // The SPEC's string, as a reference rather than the data URL itself (up to
  // ~7 MB each, a page of them would be hundreds): the path of the route that
  // serves the image; its type and size come beside it.
  screenshot: z.string().nullable().describe('path of GET /api/feedback/{id}/screenshot, or null'),
  screenshotType: z.string().nullable().describe('media type of the screenshot, e.g. image/png; null without one'),
  screenshotSize: z.number().int().nullable().describe('size of the screenshot image in bytes; null without one'),
  adminNotes: z.string().nullable().describe(RETURNED_ESCAPED),
  resolvedBy: z.string().nullable().describe(RETURNED_ESCAPED),
  resolvedAt: timestamp.nullable(),
  websiteId: z.uuid().nullable(),
  createdAt: timestamp,
  updatedAt: timestamp,
});
export type Feedback = z.infer<typeof FeedbackSchema>;

export const ListFeedbackResponseSchema = z.object({
  success: z.literal(true),
  data: z.array(FeedbackSchema),
  pagination: PaginationSchema,
});

/** One feedback item (what the admin page the notification e-mail links to reads). */
export const FeedbackItemResponseSchema = z.object({ success: z.literal(true), data: FeedbackSchema });

export const FeedbackIdParamsSchema = z.object({ id: uuidInput('Feedback id') });

export const UpdateFeedbackBodySchema = z
  .object({
    status: FeedbackStatusSchema.optional(),
    // null clears the notes: the list shows null for notes never written too.
    adminNotes: requiredString('Admin notes')
      .max(5000, 'Admin notes must be at most 5000 characters')
      .refine(isStorableText, unstorable('Admin notes'))
      .nullable()
      .meta({ description: `At most 5000 characters; null clears the notes. ${STORED_ESCAPED}` })
      .optional(),
    resolvedBy: requiredString('resolvedBy')
      .trim()
      .min(1, 'resolvedBy must not be empty')
      .max(200, 'resolvedBy must be at most 200 characters')
      .refine(isStorableText, unstorable('resolvedBy'))
      .meta(trimmedText('1 to 200 characters', `Not with status \`pending\`. ${STORED_ESCAPED}`))
      .optional(),
  })
  .refine((body) => body.status !== undefined || body.adminNotes !== undefined || body.resolvedBy !== undefined, {
    message: 'At least one of status, adminNotes or resolvedBy is required',
  })
  // The rule above, in the document: a refine has no JSON Schema form.
  .meta({
    anyOf: [{ required: ['status'] }, { required: ['adminNotes'] }, { required: ['resolvedBy'] }],
    // The refine below, in the document: "not both" has no plainer JSON Schema form.
    not: { required: ['status', 'resolvedBy'], properties: { status: { const: 'pending' } } },
    description: 'At least one of status, adminNotes or resolvedBy; resolvedBy cannot come with status `pending`',
  })
  .refine((body) => !(body.status === 'pending' && body.resolvedBy !== undefined), {
    message: 'resolvedBy cannot be set when moving feedback back to pending',
    path: ['resolvedBy'],
  });
export type UpdateFeedbackBody = z.infer<typeof UpdateFeedbackBodySchema>;

export const UpdateFeedbackResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({ id: z.uuid(), status: FeedbackStatusSchema, resolvedAt: timestamp.nullable() }),
});

export const DeleteFeedbackResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({ id: z.uuid() }),
});

/**
 * The screenshot's 200: the bytes, which Fastify writes as they are (no
 * serializer runs on a Buffer). The document shows them as binary.
 */
export const ScreenshotResponseSchema = z.instanceof(Buffer).meta({
  type: 'string',
  format: 'binary',
  description: 'The stored image (PNG, JPEG, GIF, WebP or AVIF), inline; anything else as an application/octet-stream download',
});
