import { z } from 'zod';
import { MetricsSnapshotSchema } from '../../plugins/metrics-snapshot.ts';
import { HealthReportSchema } from './health.ts';

// Shapes of /api/admin (health and metrics; logs and users have modules of their own).

export const HealthResponseSchema = z.object({ success: z.literal(true), data: HealthReportSchema });
export const HealthFailureSchema = z.object({
  success: z.literal(false),
  error: z.string(),
  statusCode: z.literal(503),
  data: HealthReportSchema,
});
export const MetricsResponseSchema = z.object({ success: z.literal(true), data: MetricsSnapshotSchema });
