import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, Gauge, Registry } from 'prom-client';
import type { Config } from '../config.ts';
import { counterOfTotal } from '../lib/counter-of-total.ts';
import { LatencyHistogram, LatencySummary } from '../lib/latency-summary.ts';
import { LatencyWindow } from '../lib/latency-window.ts';
import { RateWindow } from '../lib/rate-window.ts';
import { prometheusRoute } from './metrics-route.ts';
import { type MetricsSample, type MetricsSnapshot, snapshotFrom } from './metrics-snapshot.ts';

// Request and process metrics in a prom-client registry of this app's own (not
// the global default, so several apps in one process keep apart). The same
// registry feeds GET /metrics (Prometheus text), GET /api/admin/metrics and
// the /admin/status dashboard. A one-second sampler keeps the last minutes
// for the dashboard's charts.

declare module 'fastify' {
  interface FastifyInstance {
    metrics: Metrics;
  }
  interface FastifyContextConfig {
    /** false: the route is not counted (long-lived streams would skew latency). */
    metrics?: boolean;
  }
}

export interface Metrics {
  registry: Registry;
  startedAt: Date;
  snapshot(): Promise<MetricsSnapshot>;
  /** One sample per second, oldest first, at most `historySeconds`. */
  history(): MetricsSample[];
}

export interface MetricsOptions {
  config: Config;
  sampleIntervalMs?: number;
  historySeconds?: number;
}

const PERCENTILES = [0.5, 0.95, 0.99];
const UNMATCHED = '(unmatched)';

/** How often the event-loop delay is sampled (ms); what the loop is late by is what exceeds it. */
const LAG_RESOLUTION_MS = 10;

export default fp<MetricsOptions>(
  async function metricsPlugin(app: FastifyInstance, { config, sampleIntervalMs = 1_000, historySeconds = 300 }) {
    const registry = new Registry();
    const registers = [registry];
    const startedAt = new Date();
    const window = new RateWindow(60);
    const lag = monitorEventLoopDelay({ resolution: LAG_RESOLUTION_MS });
    lag.enable();
    let lagMs = { mean: 0, p50: 0, p99: 0, max: 0 };

    const requests = new Counter({
      name: 'http_requests_total',
      help: 'Requests answered, by method, route and status class',
      labelNames: ['method', 'route', 'status_class'] as const,
      registers,
    });
    const responses = new Counter({
      name: 'http_responses_total',
      help: 'Responses by status code',
      labelNames: ['status_code'] as const,
      registers,
    });
    const duration = new LatencySummary({
      name: 'http_request_duration_seconds',
      help: 'Response time per route since start',
      percentiles: PERCENTILES,
      registers,
    });
    // The same observations in buckets, under OpenTelemetry's name for them: what adds up across
    // instances and answers "how many took under X" (lib/latency-summary.ts).
    new LatencyHistogram({
      name: 'http_server_request_duration_seconds',
      help: 'Response time per route since start, in buckets',
      source: duration,
      registers,
    });
    // The dashboard's last-minute percentiles (lib/latency-window.ts), also read out as gauges.
    const recent = new LatencyWindow(60, 6);
    const recentLatencyMs = () => {
      const [p50, p95, p99] = recent.percentiles(PERCENTILES.map((q) => q * 100));
      return { p50, p95, p99 };
    };
    new Gauge({
      name: 'http_request_duration_recent_seconds',
      help: 'Response time of all routes over the last minute, by quantile',
      labelNames: ['quantile'] as const,
      registers,
      collect() {
        const { p50, p95, p99 } = recentLatencyMs();
        // A minute without requests has no percentiles: NaN, as a Prometheus summary reports a
        // quantile without observations. Left unset, a gauge repeats its last value for ever.
        for (const [quantile, ms] of [[0.5, p50], [0.95, p95], [0.99, p99]] as const) {
          this.set({ quantile: String(quantile) }, ms === null ? Number.NaN : ms / 1000);
        }
      },
    });
    const gauge = (name: string, help: string, read: () => number) =>
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(read());
        },
      });
    gauge('http_requests_per_second', 'Mean requests per second over the last minute', () => window.perSecond());
    gauge('process_resident_memory_bytes', 'Resident set size', () => process.memoryUsage.rss());
    gauge('nodejs_heap_used_bytes', 'V8 heap in use', () => process.memoryUsage().heapUsed);
    gauge('nodejs_heap_total_bytes', 'V8 heap allocated', () => process.memoryUsage().heapTotal);
    const lagWindow = 'over the last sampling interval (1 s; the delay itself is sampled every 10 ms)';
    gauge('nodejs_eventloop_lag_mean_seconds', `Mean event-loop delay ${lagWindow}`, () => lagMs.mean / 1000);
    gauge('nodejs_eventloop_lag_p99_seconds', `99th percentile of event-loop delay ${lagWindow}`, () => lagMs.p99 / 1000);
    gauge('nodejs_eventloop_lag_max_seconds', `Largest event-loop delay ${lagWindow}`, () => lagMs.max / 1000);
    gauge('process_uptime_seconds', 'Seconds since the app started', () => (Date.now() - startedAt.getTime()) / 1000);
    // Two of the standard process metrics, under their usual names, read only when scraped: what
    // ready-made dashboards show for CPU and restarts. (prom-client's default collectors as a whole
    // would clash with the event-loop gauges above, which take off the sampler's own 10 ms.)
    // Worked out once: read again on each scrape, a clock step would look like a restart.
    const processStartedSeconds = Math.round(Date.now() / 1000 - process.uptime());
    gauge('process_start_time_seconds', 'Start time of the process since the Unix epoch in seconds', () => processStartedSeconds);
    counterOfTotal('process_cpu_seconds_total', 'Total user and system CPU time spent in seconds', registers, () => {
      const { user, system } = process.cpuUsage();
      return (user + system) / 1e6;
    });

    function count(request: FastifyRequest, statusCode: number, elapsedMs: number) {
      const route = request.routeOptions.url ?? UNMATCHED;
      requests.inc({ method: request.method, route, status_class: `${Math.floor(statusCode / 100)}xx` });
      responses.inc({ status_code: String(statusCode) });
      duration.observe(request.method, route, elapsedMs);
      recent.record(elapsedMs);
      window.record();
    }
    app.addHook('onResponse', function countResponse(request: FastifyRequest, reply, done) {
      if (request.routeOptions.config?.metrics !== false) count(request, reply.statusCode, reply.elapsedTime);
      done();
    });
    // A response that closed before it was sent in full (the client gave up on a slow answer, a
    // download cut) never reaches onResponse: counted here, 499 when no answer had begun, with the
    // time it was waited for, so slow answers nobody waited for still show. request-log.ts tells
    // of them (app.ts registers it first); an app without it counts no such requests.
    if (app.hasDecorator('onUnfinishedResponse')) {
      app.onUnfinishedResponse(function countUnfinishedResponse(request, reply, statusCode) {
        if (request.routeOptions.config?.metrics !== false) count(request, statusCode, reply.elapsedTime);
      });
    }

    const snapshot = async () =>
      snapshotFrom({
        startedAt,
        perSecond: window.perSecond(),
        requests: await requests.get(),
        responses: await responses.get(),
        duration: await duration.get(),
        recentLatencyMs: recentLatencyMs(),
        eventLoopLagMs: lagMs,
      });

    const samples: MetricsSample[] = [];
    async function sample() {
      // The histogram holds the time between the sampling timer's runs, the 10 ms it waits
      // included: an idle process read 10 ms of lag, and an alert on lag above 10 ms always fired.
      const ms = (ns: number) => (Number.isFinite(ns) ? Math.max(0, ns / 1e6 - LAG_RESOLUTION_MS) : 0);
      lagMs = { mean: ms(lag.mean), p50: ms(lag.percentile(50)), p99: ms(lag.percentile(99)), max: ms(lag.max) };
      lag.reset();
      const now = await snapshot();
      samples.push({
        t: Date.now(),
        requestsPerSecond: window.lastSecond(),
        latencyMs: now.latencyMs,
        rssBytes: now.memory.rssBytes,
        heapUsedBytes: now.memory.heapUsedBytes,
        eventLoopLagP99Ms: lagMs.p99,
      });
      if (samples.length > historySeconds) samples.splice(0, samples.length - historySeconds);
    }
    const sampler = setInterval(() => void sample().catch((error) => app.log.error({ err: error }, 'metrics sample failed')), sampleIntervalMs);
    sampler.unref();
    app.addHook('onClose', async () => {
      clearInterval(sampler);
      lag.disable();
    });

    app.decorate('metrics', { registry, startedAt, snapshot, history: () => samples.slice() } satisfies Metrics);

    if (config.METRICS_TOKEN) prometheusRoute(app, registry, config.METRICS_TOKEN);
  },
  { name: 'metrics' },
);
