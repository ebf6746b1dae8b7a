import type { MetricObjectWithValues, MetricValue } from 'prom-client';
import type { MetricValues } from '../lib/latency-summary.ts';
import { z } from 'zod';

// The JSON view of the metrics registry, shared by GET /api/admin/metrics and
// the /admin/status stream. Latencies are milliseconds; a percentile with no
// observations yet is null.

const nullableMs = z.number().nonnegative().nullable();
const LatencySchema = z.object({ p50: nullableMs, p95: nullableMs, p99: nullableMs });

export const RouteMetricsSchema = z.object({
  method: z.string(),
  route: z.string(),
  count: z.number().int(),
  /** Answers with status 400 and above. */
  errors: z.number().int(),
  serverErrors: z.number().int(),
  latencyMs: LatencySchema,
});

export const MetricsSnapshotSchema = z.object({
  startedAt: z.iso.datetime(),
  uptimeSeconds: z.number(),
  requests: z.object({
    total: z.number().int(),
    perSecond: z.number().describe('mean over the last minute'),
    byStatusClass: z.record(z.string(), z.number().int()),
    byStatusCode: z.record(z.string(), z.number().int()),
  }),
  latencyMs: LatencySchema.describe('all routes, last minute'),
  routes: z.array(RouteMetricsSchema).describe('since start, busiest first'),
  memory: z.object({
    rssBytes: z.number(),
    heapUsedBytes: z.number(),
    heapTotalBytes: z.number(),
    externalBytes: z.number(),
  }),
  eventLoopLagMs: z.object({ mean: z.number(), p50: z.number(), p99: z.number(), max: z.number() }),
});

export const MetricsSampleSchema = z.object({
  t: z.number().int().describe('epoch milliseconds'),
  requestsPerSecond: z.number(),
  latencyMs: LatencySchema,
  rssBytes: z.number(),
  heapUsedBytes: z.number(),
  eventLoopLagP99Ms: z.number(),
});

export type MetricsSnapshot = z.infer<typeof MetricsSnapshotSchema>;
export type MetricsSample = z.infer<typeof MetricsSampleSchema>;
type RouteMetrics = z.infer<typeof RouteMetricsSchema>;

type Values = MetricObjectWithValues<MetricValue<string>>;

const toMs = (seconds: number | undefined) =>
  seconds === undefined || !Number.isFinite(seconds) ? null : Math.round(seconds * 1e6) / 1e3;

function quantiles(values: MetricValues['values'], matches: (labels: Record<string, unknown>) => boolean) {
  const at = (q: number) => values.find((v) => v.labels.quantile === q && matches(v.labels))?.value;
  return { p50: toMs(at(0.5)), p95: toMs(at(0.95)), p99: toMs(at(0.99)) };
}

export interface SnapshotInput {
  startedAt: Date;
  perSecond: number;
  requests: Values;
  responses: Values;
  duration: MetricValues;
  /** All routes over the last minute. */
  recentLatencyMs: MetricsSnapshot['latencyMs'];
  eventLoopLagMs: MetricsSnapshot['eventLoopLagMs'];
}

export function snapshotFrom(input: SnapshotInput): MetricsSnapshot {
  const byStatusClass: Record<string, number> = {};
  const routes = new Map<string, RouteMetrics>();
  let total = 0;
  for (const { labels, value } of input.requests.values) {
    const statusClass = String(labels.status_class);
    const method = String(labels.method);
    const route = String(labels.route);
    total += value;
    byStatusClass[statusClass] = (byStatusClass[statusClass] ?? 0) + value;
    const key = `${method} ${route}`;
    let entry = routes.get(key);
    if (!entry) {
      const latencyMs = quantiles(input.duration.values, (l) => l.method === method && l.route === route);
      entry = { method, route, count: 0, errors: 0, serverErrors: 0, latencyMs };
      routes.set(key, entry);
    }
    entry.count += value;
    if (statusClass === '4xx' || statusClass === '5xx') entry.errors += value;
    if (statusClass === '5xx') entry.serverErrors += value;
  }
  const byStatusCode: Record<string, number> = {};
  for (const { labels, value } of input.responses.values) byStatusCode[String(labels.status_code)] = value;
  const memory = process.memoryUsage();
  return {
    startedAt: input.startedAt.toISOString(),
    uptimeSeconds: Math.round((Date.now() - input.startedAt.getTime()) / 100) / 10,
    requests: { total, perSecond: Math.round(input.perSecond * 1000) / 1000, byStatusClass, byStatusCode },
    latencyMs: input.recentLatencyMs,
    routes: [...routes.values()].sort((a, b) => b.count - a.count),
    memory: {
      rssBytes: memory.rss,
      heapUsedBytes: memory.heapUsed,
      heapTotalBytes: memory.heapTotal,
      externalBytes: memory.external,
    },
    eventLoopLagMs: input.eventLoopLagMs,
  };
}
