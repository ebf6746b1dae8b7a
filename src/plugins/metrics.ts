import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { Counter, Gauge, Histogram, type MetricValue, Registry } from 'prom-client';
import type { Config } from '../config.ts';
import { counterOfTotal } from '../lib/counter-of-total.ts';
import { withinDeadline } from '../lib/deadline.ts';
import { notificationsPerHour } from '../modules/feedback/outbox/capped-claims.ts';
import { CAP_WINDOW_MS } from '../modules/feedback/outbox/worker.ts';
import { DURATION_BUCKETS_SECONDS, LatencyHistogram, LatencySummary } from '../lib/latency-summary.ts';
import { LatencyWindow } from '../lib/latency-window.ts';
import { RateWindow } from '../lib/rate-window.ts';
import type { AuthServerObserver } from './supabase.ts';
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
  /** What the app's dependencies report as it happens, for /metrics (DependencyMetrics). */
  dependencies: DependencyMetrics;
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

/**
 * The methods the app serves, each a `method` label of its own. Node's parser
 * takes 34 methods (PROPFIND, M-SEARCH, …): each with each route was about 24
 * series more, for ever, and one client's 1,500 requests made every scrape 25
 * times larger. Every other method is `other`.
 */
const LABELLED_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
export const methodLabel = (method: string) => (LABELLED_METHODS.has(method) ? method : 'other');

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
      const method = methodLabel(request.method);
      requests.inc({ method, route, status_class: `${Math.floor(statusCode / 100)}xx` });
      responses.inc({ status_code: String(statusCode) });
      duration.observe(method, route, elapsedMs);
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

    const dependencies = dependencyMetrics(app, registers, notificationsPerHour(config));
    app.decorate('metrics', { registry, startedAt, dependencies, snapshot, history: () => samples.slice() } satisfies Metrics);

    if (config.METRICS_TOKEN) prometheusRoute(app, registry, config.METRICS_TOKEN);
  },
  { name: 'metrics' },
);

/** Why an ingestion request was refused without its event being tried: the queue was full, or no batch took it in time. */
export type IngestRefusal = 'queue_full' | 'queue_wait';

/**
 * The dependencies' side of /metrics: the series an on-call alerts on when a
 * part the app needs fails (README, Metrics). Counters are told as things
 * happen; gauges are read when scraped, from whoever registered a reading.
 */
export interface DependencyMetrics {
  /** One call to the auth server (plugins/supabase.ts). */
  authServerCall: AuthServerObserver;
  /** A request refused for its budget (plugins/rate-limit.ts), by the budget's group. */
  rateLimitRefused(group: string): void;
  /** Whether the rate-limit store (Redis) is down and limits are counted in this process. */
  watchRateLimitStore(isDown: () => boolean): void;
  /** Events waiting in the ingestion group commit's queue (modules/analytics/batcher.ts). */
  watchIngestQueue(waiting: () => number): void;
  ingestRefused(reason: IngestRefusal): void;
  /** A feedback notification e-mail the mail provider did not take (countNotificationSendFailure). */
  notificationSendFailed(provider: string): void;
  /** A request Node's HTTP parser refused (plugins/errors.ts, clientErrorHandler): no route saw it. */
  parserRefused(statusCode: number, code: string | undefined): void;
}

/**
 * Counts one feedback notification e-mail that failed to send (a refusal or
 * no answer from the provider, each try once): what an alert on the mail
 * provider reads. `provider` is the transport's name (resend, smtp).
 */
export function countNotificationSendFailure(app: FastifyInstance, provider: string): void {
  if (app.hasDecorator('metrics')) app.metrics.dependencies.notificationSendFailed(provider);
}

/** How long one read of the outbox serves scrapes: many scrapers (or a fast one) cost one query per this. */
const OUTBOX_READ_EVERY_MS = 5_000;
/** A scrape waits this long for the outbox's read, then answers without it. */
const OUTBOX_READ_DEADLINE_MS = 1_000;

/**
 * Notifications owed (neither sent nor given up), as the worker's claim reads
 * them, one index-only scan of its partial index; and the e-mails claimed in
 * the hourly cap's window, counted as the claim under the cap counts them
 * (capped-claims.ts), from the index of claimed_at.
 */
const OUTBOX_OWED = `select count(*)::int as owed, coalesce(extract(epoch from now() - min(created_at)), 0)::float8 as oldest_age_seconds,
       (select count(distinct coalesce(digest_id, id)) from public.feedback_outbox
         where claimed_at > now() - make_interval(secs => ${CAP_WINDOW_MS / 1000}))::int as claimed_in_cap_window
  from public.feedback_outbox where sent_at is null and gave_up_at is null`;

/**
 * A gauge read when scraped that has no sample while `read` has no value.
 * prom-client's own gauge writes 0 for a gauge without labels that was not
 * set, and a 0 for "unknown" reads as "all is well" to an alert.
 */
class GaugeOfReading {
  readonly name: string;
  readonly help: string;
  readonly type = 'gauge' as const;
  readonly aggregator = 'sum' as const;
  private readonly read: () => Promise<number | undefined> | number | undefined;

  constructor(name: string, help: string, registers: Registry[], read: () => Promise<number | undefined> | number | undefined) {
    this.name = name;
    this.help = help;
    this.read = read;
    for (const registry of registers) registry.registerMetric(this as never);
  }

  async get() {
    const value = await this.read();
    const values: MetricValue<string>[] = value === undefined ? [] : [{ value, labels: {} }];
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset() {}
}

function dependencyMetrics(app: FastifyInstance, registers: Registry[], notificationCap: number): DependencyMetrics {
  // The pool, as request work sees it (plugins/db.ts, PoolState); read from the app's own counts, no query.
  const pool = () => (app.hasDecorator('db') ? app.db.poolState() : undefined);
  new GaugeOfReading('db_pool_connections_max', 'Most connections the pool opens (DATABASE_POOL_MAX)', registers, () => pool()?.max);
  new GaugeOfReading(
    'db_pool_connections_in_use',
    "Pool connections held by request work (transactions, read chains, bounded queries; background workers' own queries are not counted). Near db_pool_connections_max for minutes: the pool is too small or queries too slow",
    registers,
    () => pool()?.inUse,
  );
  new GaugeOfReading(
    'db_pool_requests_waiting',
    'Request work waiting for a pool connection now. Alert when above 0 for a minute: requests are queueing for the database and will get 503 at DATABASE_ACQUIRE_TIMEOUT_MS',
    registers,
    () => pool()?.waiting,
  );
  counterOfTotal(
    'db_pool_acquire_timeouts_total',
    'Requests refused (503) because no pool connection came within DATABASE_ACQUIRE_TIMEOUT_MS. Any increase: the pool was exhausted',
    registers,
    () => pool()?.acquireTimeouts ?? 0,
  );

  // The outbox: one query at most every OUTBOX_READ_EVERY_MS, shared by the scrapes meanwhile.
  let outboxRead: { at: number; result: Promise<{ owed: number; oldestAt: number; claimedInCapWindow: number } | undefined> } | undefined;
  function readOutbox() {
    if (outboxRead && Date.now() - outboxRead.at < OUTBOX_READ_EVERY_MS) return outboxRead.result;
    const at = Date.now();
    const result = (async () => {
      if (!app.hasDecorator('db')) return undefined;
      const query = app.db.sql.unsafe<{ owed: number; oldest_age_seconds: number; claimed_in_cap_window: number }[]>(OUTBOX_OWED);
      query.catch(() => {});
      try {
        const [row] = await withinDeadline(query, OUTBOX_READ_DEADLINE_MS, () => {
          void Promise.resolve(query.cancel()).catch(() => {});
          return new Error(`the outbox was not read within ${OUTBOX_READ_DEADLINE_MS} ms`);
        });
        return { owed: row.owed, oldestAt: at - row.oldest_age_seconds * 1000, claimedInCapWindow: row.claimed_in_cap_window };
      } catch (error) {
        app.log.warn({ err: error }, 'metrics: feedback outbox not read; its gauges are left out of this scrape');
        return undefined;
      }
    })();
    outboxRead = { at, result };
    return result;
  }
  const outboxAbsent = 'No sample when the database could not be read (within 1 s) at the last read, never a stale figure; read at most every 5 s';
  new GaugeOfReading(
    'feedback_outbox_owed',
    `Feedback notification e-mails owed: neither sent nor given up. Growing while feedback arrives: the mail provider or the worker is failing, or the hourly cap is holding them (feedback_outbox_cap_room 0). ${outboxAbsent}`,
    registers,
    async () => (await readOutbox())?.owed,
  );
  new GaugeOfReading(
    'feedback_outbox_oldest_owed_age_seconds',
    `Age of the oldest owed feedback notification (0 when none is owed). Above 300 while feedback_outbox_cap_room is not 0: notifications are not going out (at 0 the hourly cap holds them, by design, up to about an hour). ${outboxAbsent}`,
    registers,
    async () => {
      const read = await readOutbox();
      if (!read) return undefined;
      return read.owed === 0 ? 0 : Math.max(0, (Date.now() - read.oldestAt) / 1000);
    },
  );
  // Without a cap, no sample: an alert's `unless on() (feedback_outbox_cap_room == 0)` then holds nothing back.
  new GaugeOfReading(
    'feedback_outbox_cap_room',
    `Notification e-mails the hourly cap (FEEDBACK_NOTIFICATIONS_PER_HOUR) still allows in the last hour, all instances together; 0: owed notifications wait for room, by design. No sample without a cap. ${outboxAbsent}`,
    registers,
    async () => {
      if (notificationCap === 0) return undefined;
      const read = await readOutbox();
      return read && Math.max(0, notificationCap - read.claimedInCapWindow);
    },
  );
  const sendFailures = new Counter({
    name: 'feedback_notification_send_failures_total',
    help: 'Feedback notification e-mails the mail provider did not take, each try counted, by provider. A rate above 0 for minutes: the provider is failing (a key revoked, an outage)',
    labelNames: ['provider'] as const,
    registers,
  });

  const authCalls = new Counter({
    name: 'auth_server_requests_total',
    help: 'Calls to the auth server (Supabase Auth) by outcome: ok, 4xx (its refusal of what a client sent), 5xx, unreachable, timeout (AUTH_TIMEOUT_MS). Alert on the rate of 5xx, unreachable and timeout: sign-in and every session check fail',
    labelNames: ['outcome'] as const,
    registers,
  });
  const authDuration = new Histogram({
    name: 'auth_server_request_duration_seconds',
    help: 'Time the auth server took to answer (or to fail), by outcome',
    labelNames: ['outcome'] as const,
    buckets: [...DURATION_BUCKETS_SECONDS],
    registers,
  });

  const rateLimitRefusals = new Counter({
    name: 'rate_limit_refusals_total',
    help: "Requests refused (429) for their rate-limit budget, by the budget's group (general, auth, passwordReset, account, feedback, ingest). A jump: a client or an attack is at the limit",
    labelNames: ['group'] as const,
    registers,
  });
  let rateLimitStoreDown: (() => boolean) | undefined;
  new GaugeOfReading(
    'rate_limit_store_fallback',
    'Whether the rate-limit store (Redis) is unavailable and limits are counted in this process (1), or counted in Redis (0). No sample without REDIS_URL. Alert when 1 for minutes: each instance counts on its own, so limits are per instance',
    registers,
    () => (rateLimitStoreDown ? Number(rateLimitStoreDown()) : undefined),
  );

  let ingestWaiting: (() => number) | undefined;
  new GaugeOfReading(
    'analytics_ingest_queue_events',
    'Analytics events waiting in the group-commit queue for a batch (at ANALYTICS_QUEUE_MAX new events are refused). Staying high: the database writes too slowly',
    registers,
    () => ingestWaiting?.(),
  );
  const ingestRefusals = new Counter({
    name: 'analytics_ingest_refusals_total',
    help: 'Analytics events refused (503) without being tried, by reason: queue_full (ANALYTICS_QUEUE_MAX reached), queue_wait (no batch took the event within ANALYTICS_QUEUE_MAX_WAIT_MS). Any rate: ingestion is overloaded or the database slow',
    labelNames: ['reason'] as const,
    registers,
  });

  const parserRefusals = new Counter({
    name: 'http_client_errors_total',
    help: "Requests Node's HTTP parser refused before any route saw them (so in no other http_ series), by status (400 malformed, 408 too slow, 431 headers too large) and the parser's code. 431 from real users: a cookie grown too big locks them out",
    labelNames: ['status_code', 'code'] as const,
    registers,
  });

  return {
    authServerCall(outcome, seconds) {
      authCalls.inc({ outcome });
      authDuration.observe({ outcome }, seconds);
    },
    rateLimitRefused: (group) => rateLimitRefusals.inc({ group }),
    watchRateLimitStore(isDown) {
      rateLimitStoreDown = isDown;
    },
    watchIngestQueue(waiting) {
      ingestWaiting = waiting;
    },
    ingestRefused: (reason) => ingestRefusals.inc({ reason }),
    notificationSendFailed: (provider) => sendFailures.inc({ provider }),
    parserRefused: (statusCode, code) => parserRefusals.inc({ status_code: String(statusCode), code: code ?? 'unknown' }),
  };
}
