import { Registry, Summary } from 'prom-client';
import { describe, expect, it } from 'vitest';
import { LatencySummary } from './latency-summary.ts';

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
