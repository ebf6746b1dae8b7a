// Events per second over a sliding window, in one-second buckets: a ring of
// counters indexed by the epoch second, so recording is O(1) and old seconds
// are overwritten instead of kept.

export class RateWindow {
  private readonly windowSeconds: number;
  private readonly counts: number[];
  private readonly seconds: number[];
  private readonly startedAt: number;

  constructor(windowSeconds = 60, now = Date.now()) {
    this.windowSeconds = windowSeconds;
    this.counts = new Array<number>(windowSeconds).fill(0);
    this.seconds = new Array<number>(windowSeconds).fill(-1);
    this.startedAt = now;
  }

  record(now = Date.now(), count = 1): void {
    const second = Math.floor(now / 1000);
    const slot = second % this.windowSeconds;
    if (this.seconds[slot] !== second) {
      this.seconds[slot] = second;
      this.counts[slot] = 0;
    }
    this.counts[slot] += count;
  }

  /** Events in the one complete second before `now`. */
  lastSecond(now = Date.now()): number {
    const second = Math.floor(now / 1000) - 1;
    const slot = ((second % this.windowSeconds) + this.windowSeconds) % this.windowSeconds;
    return this.seconds[slot] === second ? this.counts[slot] : 0;
  }

  /**
   * Mean rate over the last `windowSeconds`, the current second included so
   * that a burst shows at once; a window younger than that is divided by its
   * own age, so the first minute is not understated.
   */
  perSecond(now = Date.now()): number {
    const current = Math.floor(now / 1000);
    const oldest = current - this.windowSeconds + 1;
    let total = 0;
    for (let slot = 0; slot < this.windowSeconds; slot += 1) {
      const second = this.seconds[slot];
      if (second >= oldest && second <= current) total += this.counts[slot];
    }
    const ageSeconds = Math.min(this.windowSeconds, Math.max(1, (now - this.startedAt) / 1000));
    return total / ageSeconds;
  }
}
