import { Histogram, Registry, Summary } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { DURATION_BUCKETS_SECONDS, LatencyHistogram, LatencySummary } from './latency-summary.ts';

const PERCENTILES = [0.5, 0.95, 0.99];

/** `name{labels} value` lines of Prometheus text, as [series, value]. */
const series = (text: string) =>
  text
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const at = line.lastIndexOf(' ');
      return [line.slice(0, at), Number(line.slice(at + 1))] as const;
    });

/**
 * Observes each of `milliseconds` on GET /a and 3.5 ms on POST /b, in ours and in prom-client's
 * metric alike; answers both registries' series, which must be the same lines in the same order.
 */
async function sameObservations(
  ours: { observe(method: string, route: string, ms: number): void },
  oursRegistry: Registry,
  theirs: { observe(labels: { method: string; route: string }, seconds: number): void },
  theirsRegistry: Registry,
  milliseconds: number[],
) {
  for (const [method, route, ms] of [...milliseconds.map((ms) => ['GET', '/a', ms] as const), ['POST', '/b', 3.5] as const]) {
    ours.observe(method, route, ms);
    theirs.observe({ method, route }, ms / 1000);
  }
  const text = await oursRegistry.metrics();
  const got = series(text);
  const want = series(await theirsRegistry.metrics());
  expect(got.map(([name]) => name)).toEqual(want.map(([name]) => name));
  return { text, pairs: got.map(([name, value], i) => [name, value, want[i][1]] as const), got: Object.fromEntries(got) };
}

describe('LatencySummary', () => {
  it("writes the same Prometheus series as prom-client's Summary: exact sum and count, quantiles within 1 %", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const summary = new LatencySummary({ name: 'http_request_duration_seconds', help: 'Response time', percentiles: PERCENTILES, registers: [ours] });
    const reference = new Summary({ name: 'http_request_duration_seconds', help: 'Response time', labelNames: ['method', 'route'], percentiles: PERCENTILES, registers: [theirs] });
    const everyMs = Array.from({ length: 1000 }, (_, i) => i + 1);
    const { text, pairs, got } = await sameObservations(summary, ours, reference, theirs, everyMs);
    expect(text).toContain('# TYPE http_request_duration_seconds summary');
    expect(Object.keys(got)).toContain('http_request_duration_seconds{quantile="0.99",method="GET",route="/a"}');
    for (const [name, value, expected] of pairs) {
      if (name.includes('_count')) expect(value, name).toBe(expected);
      else expect(Math.abs(value - expected) / expected, name).toBeLessThan(0.01);
    }
    expect(got['http_request_duration_seconds_count{method="GET",route="/a"}']).toBe(1000);
    expect(got['http_request_duration_seconds_sum{method="GET",route="/a"}']).toBeCloseTo(500.5, 6);
  });

  it('reset forgets every series', async () => {
    const summary = new LatencySummary({ name: 'd', help: 'h', percentiles: [0.5], registers: [] });
    summary.observe('GET', '/a', 1);
    summary.reset();
    expect((await summary.get()).values).toEqual([]);
  });
});

describe('LatencyHistogram', () => {
  it("writes the same Prometheus series as prom-client's Histogram with the same buckets, counts exact", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const summary = new LatencySummary({ name: 'summary', help: 'h', percentiles: PERCENTILES, registers: [] });
    new LatencyHistogram({ name: 'http_server_request_duration_seconds', help: 'Response time', source: summary, registers: [ours] });
    const reference = new Histogram({
      name: 'http_server_request_duration_seconds',
      help: 'Response time',
      labelNames: ['method', 'route'],
      buckets: [...DURATION_BUCKETS_SECONDS],
      registers: [theirs],
    });
    // Every bound itself (at most its bound: in its bucket), between the bounds, and past the last.
    const observed = [...DURATION_BUCKETS_SECONDS.map((bound) => bound * 1000), 0.2, 3, 60, 120, 12_000, 30_000];
    const { text, pairs, got } = await sameObservations(summary, ours, reference, theirs, observed);
    expect(text).toContain('# TYPE http_server_request_duration_seconds histogram');
    for (const [name, value, expected] of pairs) {
      if (name.includes('_sum')) expect(value, name).toBeCloseTo(expected, 9);
      else expect(value, name).toBe(expected);
    }
    expect(got['http_server_request_duration_seconds_bucket{le="0.005",method="GET",route="/a"}']).toBe(3);
    expect(got['http_server_request_duration_seconds_bucket{le="+Inf",method="GET",route="/a"}']).toBe(observed.length);
  });
});
