import type { Histogram } from 'hdr-histogram-js';
import type { MetricValueWithName, Registry } from 'prom-client';
import { histogramMicros, latencyHistogram } from './latency-window.ts';

// Response time per route since start, exposed as a Prometheus summary
// (quantiles, _sum, _count), as prom-client's Summary writes it. prom-client
// keeps a t-digest per route and inserts into its tree on every observation:
// about 2.7 µs of a do-nothing request, the largest cost of the app's own
// hooks (docs/performance.md). Here an observation is one bucket increment
// in an HDR histogram (2 significant digits: within 1 %).
//
// The same observations are also counted in fixed buckets, read out as a
// Prometheus histogram (LatencyHistogram): a summary's quantiles cannot be
// added across instances, and since start they barely move in an incident.

/**
 * Upper bounds of the histogram's buckets, in seconds: OpenTelemetry's for
 * `http.server.request.duration`, which dashboards for that name expect.
 */
export const DURATION_BUCKETS_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10] as const;

interface Series {
  labels: { method: string; route: string };
  histogram: Histogram;
  sumSeconds: number;
  /** Observations per bucket of DURATION_BUCKETS_SECONDS (not cumulative); the last is above them all. */
  buckets: Float64Array;
}

/** What `get` answers: what prom-client's Summary (or Histogram) answers. */
export interface MetricValues<Type extends 'summary' | 'histogram' = 'summary'> {
  name: string;
  help: string;
  type: Type;
  aggregator: 'sum';
  values: MetricValueWithName<string>[];
}

export interface LatencySummaryOptions {
  name: string;
  help: string;
  /** Quantiles to expose, 0–1. */
  percentiles: number[];
  registers: Registry[];
}

/** A prom-client metric (a Registry reads it through `get`) with `method` and `route` labels. */
export class LatencySummary {
  readonly name: string;
  readonly help: string;
  readonly type = 'summary' as const;
  readonly aggregator = 'sum' as const;
  private readonly percentiles: number[];
  /** By method, then route: no key string built per observation. */
  private readonly series = new Map<string, Map<string, Series>>();

  constructor(options: LatencySummaryOptions) {
    this.name = options.name;
    this.help = options.help;
    this.percentiles = options.percentiles;
    for (const registry of options.registers) registry.registerMetric(this as never);
  }

  observe(method: string, route: string, milliseconds: number) {
    let routes = this.series.get(method);
    if (!routes) this.series.set(method, (routes = new Map()));
    let series = routes.get(route);
    if (!series) {
      const buckets = new Float64Array(DURATION_BUCKETS_SECONDS.length + 1);
      routes.set(route, (series = { labels: { method, route }, histogram: latencyHistogram(), sumSeconds: 0, buckets }));
    }
    const seconds = milliseconds / 1000;
    series.histogram.recordValue(histogramMicros(milliseconds));
    series.sumSeconds += seconds;
    // A bucket holds what is at most its bound (Prometheus's `le`); most requests stop at the first.
    let bucket = 0;
    while (bucket < DURATION_BUCKETS_SECONDS.length && seconds > DURATION_BUCKETS_SECONDS[bucket]) bucket += 1;
    series.buckets[bucket] += 1;
  }

  /** Every series observed so far. */
  *allSeries(): Iterable<Readonly<Series>> {
    for (const routes of this.series.values()) yield* routes.values();
  }

  async get(): Promise<MetricValues> {
    const values: MetricValueWithName<string>[] = [];
    for (const routes of this.series.values()) {
      for (const { labels, histogram, sumSeconds } of routes.values()) {
        for (const quantile of this.percentiles) {
          values.push({ labels: { quantile, ...labels }, value: histogram.getValueAtPercentile(quantile * 100) / 1e6 });
        }
        values.push({ metricName: `${this.name}_sum`, labels, value: sumSeconds });
        values.push({ metricName: `${this.name}_count`, labels, value: histogram.totalCount });
      }
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset() {
    this.series.clear();
  }
}

/**
 * The summary's observations as a Prometheus histogram (`_bucket` with `le`,
 * `_sum`, `_count`), read from its series when scraped: nothing more is done
 * per request than the summary's bucket count.
 */
export class LatencyHistogram {
  readonly name: string;
  readonly help: string;
  readonly type = 'histogram' as const;
  readonly aggregator = 'sum' as const;
  private readonly source: LatencySummary;

  constructor(options: { name: string; help: string; source: LatencySummary; registers: Registry[] }) {
    this.name = options.name;
    this.help = options.help;
    this.source = options.source;
    for (const registry of options.registers) registry.registerMetric(this as never);
  }

  async get(): Promise<MetricValues<'histogram'>> {
    const values: MetricValueWithName<string>[] = [];
    for (const { labels, buckets, sumSeconds } of this.source.allSeries()) {
      let cumulative = 0;
      for (const [index, count] of buckets.entries()) {
        cumulative += count;
        const le = index < DURATION_BUCKETS_SECONDS.length ? DURATION_BUCKETS_SECONDS[index] : '+Inf';
        values.push({ metricName: `${this.name}_bucket`, labels: { le, ...labels }, value: cumulative });
      }
      values.push({ metricName: `${this.name}_sum`, labels, value: sumSeconds });
      values.push({ metricName: `${this.name}_count`, labels, value: cumulative });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  /** The summary holds the counts; its reset clears both. */
  reset() {}
}
