import { z } from 'zod';
import { isStorableText, uuidInput } from '../../../lib/schemas.ts';

// Erasing one person's analytics on one website (not in the SPEC;
// docs/analytics.md, "Erasing one person"). The person is named by the ids
// the events carry, bounded as ingestion bounds them.

const personId = (label: string, description: string) =>
  z
    .string({ error: `${label} must be a string` })
    .min(1, `${label} must not be empty`)
    .max(128, `${label} must be at most 128 characters`)
    .refine(isStorableText, `${label} must not contain NUL characters or unpaired surrogates`)
    .meta({ description })
    .optional();

export const ErasureParamsSchema = z.object({ websiteId: uuidInput('Website id') });

export const ErasureBodySchema = z
  .object({
    userId: personId('User id', "The site's own id for a signed-in person, as its events sent it as userId"),
    visitorId: personId('Visitor id', "A visitor id as stored with the person's events (visitor_id)"),
    sessionId: personId('Session id', 'A session id the person\'s browser sent (the tracker keeps it in the tab\'s sessionStorage)'),
    // An erasure cannot be undone: the owner can see first how much it takes.
    dryRun: z
      .boolean({ error: 'dryRun must be true or false' })
      .meta({ description: 'true: answer the counts this erasure would have, and change nothing' })
      .optional(),
  })
  .refine((body) => body.userId !== undefined || body.visitorId !== undefined || body.sessionId !== undefined, {
    message: 'Name the person by userId, visitorId or sessionId',
  })
  // The refine, said in the OpenAPI document.
  .meta({ anyOf: ['userId', 'visitorId', 'sessionId'].map((field) => ({ required: [field] })) });
export type ErasureBody = z.infer<typeof ErasureBodySchema>;

/** What one erasure changed (or, for a dry run, would change): every count 0 for a person unknown or already erased. */
export const ErasureCountsSchema = z.object({
  events: z.number().int().meta({ description: "The person's events deleted (for a dry run: that would be)" }),
  visitors: z.number().int().meta({ description: 'Visitor ids renamed to random pseudonyms in the rollups (or that would be)' }),
  sessions: z.number().int().meta({ description: 'Session ids renamed to random pseudonyms in the rollups (or that would be)' }),
  memberRows: z.number().int().meta({ description: 'Rollup rows (visitor, session and dimension days) renamed (or that would be)' }),
});
export type ErasureCounts = z.infer<typeof ErasureCountsSchema>;

export const ErasureResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: ErasureCountsSchema,
});
