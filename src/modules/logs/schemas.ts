import { z } from 'zod';
import { boundedJsonObject, limitSchema, OffsetSchema, PaginationSchema, requiredString, trimmedText } from '../../lib/schemas.ts';
import { LOG_LEVELS } from '../../logger.ts';

// Shapes of /api/admin/logs: stored log entries, the server's and the clients'.

const LEVELS = Object.keys(LOG_LEVELS) as [keyof typeof LOG_LEVELS, ...(keyof typeof LOG_LEVELS)[]];
export const LogLevelSchema = z.enum(LEVELS, { error: `Level must be one of: ${LEVELS.join(', ')}` });
const SOURCES = ['server', 'client'] as const;

export const LogEntrySchema = z.object({
  id: z.string(),
  level: LogLevelSchema,
  message: z.string(),
  context: z.record(z.string(), z.unknown()),
  source: z.enum(SOURCES),
  requestId: z.string().nullable(),
  userId: z.uuid().nullable(),
  createdAt: z.iso.datetime(),
});

export const ListLogsQuerySchema = z.object({
  level: LogLevelSchema.optional(),
  source: z.enum(SOURCES, { error: `Source must be one of: ${SOURCES.join(', ')}` }).optional(),
  // Handed to Postgres as an instant, so an offset it would refuse (±23:59) is
  // already applied; years outside 1 to 9999 cannot be stored as timestamps.
  since: z.iso
    .datetime({ offset: true, error: 'Since must be an ISO 8601 date-time' })
    .transform((value) => new Date(value))
    .refine((date) => date.getUTCFullYear() >= 1 && date.getUTCFullYear() <= 9999, 'Since must be a date-time from year 1 to 9999')
    // The document shows the string side: say what the refine checks of the date it makes.
    .meta({ format: 'date-time', description: 'Entries from this instant on (ISO 8601, with Z or an offset); in UTC, a year from 1 to 9999' })
    .optional(),
  limit: limitSchema(500, 50),
  offset: OffsetSchema,
});

export const CreateLogBodySchema = z.object({
  level: LogLevelSchema,
  message: requiredString('Message')
    .trim()
    .min(1, 'Message is required')
    .max(10_000, 'Message must be at most 10000 characters')
    .meta(trimmedText('1 to 10000 characters')),
  // As the websites' settings are checked: what jsonb would store otherwise than sent (1e400 as null) or refuse (NUL) is a 400.
  context: boundedJsonObject('Context', 16_000).optional(),
});

export const LogsResponseSchema = z.object({ success: z.literal(true), data: z.array(LogEntrySchema), pagination: PaginationSchema });
export const CreatedLogResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({ id: z.string(), createdAt: z.iso.datetime() }),
});

export type LogEntry = z.infer<typeof LogEntrySchema>;
export type ListLogsQuery = z.infer<typeof ListLogsQuerySchema>;
export type CreateLogBody = z.infer<typeof CreateLogBodySchema>;
