import { z } from 'zod';
import { boundedJsonObject, isStorableText, PaginationSchema, requiredString } from '../../lib/schemas.ts';

// Request and response shapes of the websites routes.

export const WEBSITE_JSON_MAX_BYTES = 16 * 1024;

const HOSTNAME = /^(?=.{1,253}(?::\d{1,5})?$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*(?::\d{1,5})?$/;

const name = requiredString('Name')
  .trim()
  .min(1, 'Name is required')
  .max(200, 'Name must be at most 200 characters')
  .refine(isStorableText, 'Name must not contain NUL characters or unpaired surrogates');

const domain = requiredString('Domain')
  .trim()
  .toLowerCase()
  .regex(HOSTNAME, 'Domain must be a host name such as example.com');

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
);
export type UpdateWebsiteBody = z.infer<typeof UpdateWebsiteBodySchema>;

export const WebsiteIdParamsSchema = z.object({ id: z.uuid({ error: 'Website id must be a UUID' }) });

export const ApiKeyParamsSchema = z.object({ apiKey: z.string().min(1).max(200) });
/** The key in a header keeps it out of URLs (and so out of access logs of proxies too). */
export const ApiKeyHeadersSchema = z.object({ 'x-api-key': z.string().min(1).max(200).optional() });

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

