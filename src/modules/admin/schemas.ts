import { z } from 'zod';
import { MetricsSnapshotSchema } from '../../plugins/metrics-snapshot.ts';
import { HealthReportSchema } from './health.ts';

// Shapes of /api/admin (health and metrics; logs and users have modules of their own).

export const HealthResponseSchema = z.object({ success: z.literal(true), data: HealthReportSchema });
/**
 * The 503: the report when a dependency is down; or, without it, the error body
 * of the guard, which answers 503 itself when it cannot check the caller (the
 * database or the signing keys unavailable) before any report is made.
 */
export const HealthFailureSchema = z.object({
  success: z.literal(false),
  error: z.string(),
  statusCode: z.literal(503),
  data: HealthReportSchema.optional().describe('The health report; absent when the caller could not be checked'),
  requestId: z.string().optional().describe('With the error body only: the id to quote when reporting it'),
});
export const MetricsResponseSchema = z.object({ success: z.literal(true), data: MetricsSnapshotSchema });
