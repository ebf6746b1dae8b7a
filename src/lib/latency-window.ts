import { build, type Histogram } from 'hdr-histogram-js';

// Response-time percentiles over a sliding window (the last minute), for the
// dashboard. Recording is one bucket increment in an HDR histogram; the
// window is a ring of histograms, one per slice, so a slice older than the
// window is reset and reused. prom-client's Summary does the same job with a
// t-digest per slice, sorted on every observation: 10 µs a request, the
// plugin stack's second cost after headers (docs/performance.md).

/** Microseconds from 1 µs to 10 minutes, to 2 significant digits (1 % error); it grows for a longer one. */
export const latencyHistogram = () => build({ lowestDiscernibleValue: 1, highestTrackableValue: 600_000_000, numberOfSignificantValueDigits: 2 });

/** A response time in milliseconds as the histograms' whole microseconds, at least 1. */
export const histogramMicros = (milliseconds: number) => Math.max(1, Math.round(milliseconds * 1000));

export class LatencyWindow {
  private readonly slices: Histogram[];
  private readonly sliceStarts: number[];
  private readonly sliceMs: number;

  constructor(windowSeconds = 60, slices = 6) {
    this.sliceMs = (windowSeconds * 1000) / slices;
    this.slices = Array.from({ length: slices }, latencyHistogram);
    this.sliceStarts = new Array<number>(slices).fill(-Infinity);
  }

  record(milliseconds: number, now = Date.now()) {
    const start = now - (now % this.sliceMs);
    const index = Math.floor(start / this.sliceMs) % this.slices.length;
    if (this.sliceStarts[index] !== start) {
      this.slices[index].reset();
      this.sliceStarts[index] = start;
    }
    this.slices[index].recordValue(histogramMicros(milliseconds));
  }

  /** Milliseconds at each percentile (0–100) over the window; null when nothing was recorded. */
  percentiles(percentiles: number[], now = Date.now()): (number | null)[] {
    const merged = latencyHistogram();
    const oldest = now - this.sliceMs * this.slices.length;
    this.slices.forEach((slice, index) => {
      if (this.sliceStarts[index] > oldest) merged.add(slice);
    });
    if (merged.totalCount === 0) return percentiles.map(() => null);
    return percentiles.map((p) => merged.getValueAtPercentile(p) / 1000);
  }
}
