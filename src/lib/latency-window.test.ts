import { describe, expect, it } from 'vitest';
import { LatencyWindow } from './latency-window.ts';

describe('LatencyWindow', () => {
  it('answers percentiles of what was recorded within 1 %', () => {
    const window = new LatencyWindow(60, 6);
    const now = 1_000_000;
    for (let ms = 1; ms <= 1000; ms += 1) window.record(ms, now);
    const [p50, p99] = window.percentiles([50, 99], now) as number[];
    expect(p50).toBeGreaterThanOrEqual(495);
    expect(p50).toBeLessThanOrEqual(505);
    expect(p99).toBeGreaterThanOrEqual(980);
    expect(p99).toBeLessThanOrEqual(1000);
  });

  it('forgets slices older than the window', () => {
    const window = new LatencyWindow(60, 6);
    const start = 6_000_000;
    window.record(500, start);
    window.record(2, start + 30_000);
    expect(window.percentiles([100], start + 59_000)[0]).toBeGreaterThanOrEqual(495);
    // 70 s on, the 500 ms slice has left the window; the 2 ms one has not.
    expect(window.percentiles([100], start + 70_000)[0]).toBeCloseTo(2, 1);
    // A slice is reused when its turn comes round again, starting empty.
    window.record(7, start + 60_000);
    expect(window.percentiles([100], start + 60_000)[0]).toBeCloseTo(7, 1);
  });

  it('answers null when nothing was recorded', () => {
    expect(new LatencyWindow().percentiles([50, 99])).toEqual([null, null]);
  });
});
