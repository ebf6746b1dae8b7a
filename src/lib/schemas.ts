import { z } from 'zod';

// Schema fragments shared by the route modules: list pagination.

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
