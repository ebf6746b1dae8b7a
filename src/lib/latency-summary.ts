import type { Histogram } from 'hdr-histogram-js';
import type { MetricValueWithName, Registry } from 'prom-client';
import { histogramMicros, latencyHistogram } from './latency-window.ts';

// Response time per route since start, exposed as a Prometheus summary
// (quantiles, _sum, _count), as prom-client's Summary writes it. prom-client
// keeps a t-digest per route and inserts into its tree on every observation:
// about 2.7 µs of a do-nothing request, the largest cost of the app's own
// hooks (docs/performance.md). Here an observation is one bucket increment
// in an HDR histogram (2 significant digits: within 1 %).

interface Series {
  labels: { method: string; route: string };
  histogram: Histogram;
  sumSeconds: number;
}

/** What `get` answers: what prom-client's Summary answers. */
export interface SummaryValues {
  name: string;
  help: string;
  type: 'summary';
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
    if (!series) routes.set(route, (series = { labels: { method, route }, histogram: latencyHistogram(), sumSeconds: 0 }));
    series.histogram.recordValue(histogramMicros(milliseconds));
    series.sumSeconds += milliseconds / 1000;
  }

  async get(): Promise<SummaryValues> {
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
