import { z } from 'zod';
import { boundedJsonObject, isStorableText, PaginationSchema, requiredString, trimmedText, uuidInput } from '../../lib/schemas.ts';

// Request and response shapes of the websites routes.

export const WEBSITE_JSON_MAX_BYTES = 16 * 1024;

const HOSTNAME = /^(?=.{1,253}(?::\d{1,5})?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*(?::\d{1,5})?$/;

const name = requiredString('Name')
  .trim()
  .min(1, 'Name is required')
  .max(200, 'Name must be at most 200 characters')
  .refine(isStorableText, 'Name must not contain NUL characters or unpaired surrogates')
  .meta(trimmedText('1 to 200 characters'));

/** The pattern takes any 1 to 5 digits after the colon; a URL's port is 1 to 65535. */
const hasValidPort = (domain: string) => {
  const port = /:(\d+)$/.exec(domain)?.[1];
  return port === undefined || (Number(port) >= 1 && Number(port) <= 65_535);
};

/** The column's bound (websites.domain), port included: the pattern lets a 253-character host add one. */
const DOMAIN_MAX = 253;

const domain = requiredString('Domain')
  .trim()
  .toLowerCase()
  .regex(HOSTNAME, { error: 'Domain must be a host name such as example.com', abort: true })
  .max(DOMAIN_MAX, `Domain must be at most ${DOMAIN_MAX} characters`)
  .refine(hasValidPort, 'Domain port must be from 1 to 65535')
  // zod would document HOSTNAME, which reads the value after trim and
  // lower-casing: this is HOSTNAME for the value as sent, white space around
  // it and capitals allowed (its length and port range are said in words).
  .meta({
    pattern: String.raw`^\s*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*(?::\d{1,5})?\s*$`,
    description:
      `Trimmed and lower-cased first; then a host name, labels of letters, digits and inner hyphens (1 to 63 characters each) ` +
      `joined by dots, with an optional :port from 1 to 65535, at most ${DOMAIN_MAX} characters in all, such as example.com or localhost:3000`,
  });

export const CreateWebsiteBodySchema = z.object({
  name,
  domain,
  settings: boundedJsonObject('Settings', WEBSITE_JSON_MAX_BYTES).optional(),
  metadata: boundedJsonObject('Metadata', WEBSITE_JSON_MAX_BYTES).optional(),
});
export type CreateWebsiteBody = z.infer<typeof CreateWebsiteBodySchema>;

export const UpdateWebsiteBodySchema = CreateWebsiteBodySchema.partial().refine(
  (body) => Object.values(body).some((value) => value !== undefined),
  { message: 'Give at least one of name, domain, settings, metadata' },
  // The rule above, in the document: a refine has no JSON Schema form.
).meta({ anyOf: ['name', 'domain', 'settings', 'metadata'].map((field) => ({ required: [field] })) });
export type UpdateWebsiteBody = z.infer<typeof UpdateWebsiteBodySchema>;

export const WebsiteIdParamsSchema = z.object({ id: uuidInput('Website id') });

// Any string: a key of the wrong shape (empty, too long) is simply not one of
// ours, answered like any other wrong key (404 Website not found; the service
// refuses it before any lookup). An empty X-API-Key counts as none (401).
const apiKey = z.string().describe('a website API key, wsk_ and 43 characters');
export const ApiKeyParamsSchema = z.object({ apiKey });
/** The key in a header keeps it out of URLs (and so out of access logs of proxies too). */
// Optional to the parse, so that its absence is the route's 401; required in the document.
export const ApiKeyHeadersSchema = z.object({ 'x-api-key': apiKey.optional() }).meta({ required: ['x-api-key'] });

const timestamp = z.iso.datetime();

/** A website as readers see it: never the key, only its display prefix. */
export const WebsiteSchema = z.object({
  id: z.uuid(),
  name: z.string(),
  domain: z.string(),
  apiKeyPrefix: z.string(),
  settings: z.record(z.string(), z.unknown()),
  metadata: z.record(z.string(), z.unknown()),
  createdBy: z.uuid().nullable(),
  createdAt: timestamp,
  updatedAt: timestamp,
});
export type Website = z.infer<typeof WebsiteSchema>;

export const WebsiteResponseSchema = z.object({ success: z.literal(true), data: WebsiteSchema });

export const CreatedWebsiteResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  // The only time the key is shown in full.
  data: WebsiteSchema.extend({ apiKey: z.string() }),
});

export const ListWebsitesResponseSchema = z.object({
  success: z.literal(true),
  data: z.array(WebsiteSchema),
  pagination: PaginationSchema,
});


/** DELETE /:id when the deletion outlasts the request's wait: the website is hidden and keyless, its rows still going. */
export const DeletionUnderWayResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({ id: z.uuid() }),
});
