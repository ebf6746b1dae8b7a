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

describe('LatencySummary', () => {
  it("writes the same Prometheus series as prom-client's Summary: exact sum and count, quantiles within 1 %", async () => {
    const ours = new Registry();
    const theirs = new Registry();
    const summary = new LatencySummary({ name: 'http_request_duration_seconds', help: 'Response time', percentiles: PERCENTILES, registers: [ours] });
    const reference = new Summary({ name: 'http_request_duration_seconds', help: 'Response time', labelNames: ['method', 'route'], percentiles: PERCENTILES, registers: [theirs] });
    for (let ms = 1; ms <= 1000; ms += 1) {
      summary.observe('GET', '/a', ms);
      reference.observe({ method: 'GET', route: '/a' }, ms / 1000);
    }
    summary.observe('POST', '/b', 3.5);
    reference.observe({ method: 'POST', route: '/b' }, 0.0035);

    const text = await ours.metrics();
    expect(text).toContain('# TYPE http_request_duration_seconds summary');
    const got = series(text);
    const want = series(await theirs.metrics());
    expect(got.map(([name]) => name)).toEqual(want.map(([name]) => name));
    expect(got.map(([name]) => name)).toContain('http_request_duration_seconds{quantile="0.99",method="GET",route="/a"}');
    for (const [[name, value], [, expected]] of got.map((line, i) => [line, want[i]] as const)) {
      if (name.includes('_count')) expect(value, name).toBe(expected);
      else expect(Math.abs(value - expected) / expected, name).toBeLessThan(0.01);
    }
    expect(Object.fromEntries(got)['http_request_duration_seconds_count{method="GET",route="/a"}']).toBe(1000);
    expect(Object.fromEntries(got)['http_request_duration_seconds_sum{method="GET",route="/a"}']).toBeCloseTo(500.5, 6);
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
    for (const ms of observed) {
      summary.observe('GET', '/a', ms);
      reference.observe({ method: 'GET', route: '/a' }, ms / 1000);
    }
    summary.observe('POST', '/b', 3.5);
    reference.observe({ method: 'POST', route: '/b' }, 0.0035);

    const text = await ours.metrics();
    expect(text).toContain('# TYPE http_server_request_duration_seconds histogram');
    const got = series(text);
    const want = series(await theirs.metrics());
    expect(got.map(([name]) => name)).toEqual(want.map(([name]) => name));
    for (const [[name, value], [, expected]] of got.map((line, i) => [line, want[i]] as const)) {
      if (name.includes('_sum')) expect(value, name).toBeCloseTo(expected, 9);
      else expect(value, name).toBe(expected);
    }
    expect(Object.fromEntries(got)['http_server_request_duration_seconds_bucket{le="0.005",method="GET",route="/a"}']).toBe(3);
    expect(Object.fromEntries(got)['http_server_request_duration_seconds_bucket{le="+Inf",method="GET",route="/a"}']).toBe(observed.length);
  });
});
