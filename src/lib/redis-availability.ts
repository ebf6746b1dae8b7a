// Whether Redis answers, as the rate-limit stores and the exclusive claims
// that share one connection see it: while it fails they count and hold in
// this process (fallback-rate-store.ts, exclusive-claims.ts); each outage is
// reported when it begins and when it ends, and counted, so that the stores
// carry their local counts back to Redis once it answers again.

export interface FallbackState {
  /** Until when (epoch ms) counting stays in the process without asking Redis. */
  localUntil: number;
  /** Called when Redis fails or misses the deadline. */
  onFailure(error: Error): void;
}

/** The state the counting stores share: also when counting returns to Redis. */
export interface CountingState extends FallbackState {
  /** Outages so far; a key counted here before the latest one is carried to Redis on its next count there. */
  outages: number;
  /** Called when Redis answers a command. */
  onAnswer(): void;
}

export interface AvailabilityReport {
  /** Redis failed; `outageBegins` on the first failure after an answer. */
  unavailable(error: Error, outageBegins: boolean): void;
  /** Redis answered after an outage (once per outage). */
  answersAgain(): void;
}

/** Whether Redis answers: one per connection, shared by its stores and claims; reports each outage's start and end. */
export class RedisAvailability implements CountingState {
  localUntil = 0;
  outages = 0;
  private down = false;
  private connected = false;
  private readonly report: AvailabilityReport;

  constructor(report: AvailabilityReport) {
    this.report = report;
  }

  /** Whether an outage is under way: from Redis's first failure until it answers again. */
  get isDown(): boolean {
    return this.down;
  }

  onFailure(error: Error): void {
    const begins = !this.down;
    if (begins) {
      this.down = true;
      this.outages += 1;
    }
    this.report.unavailable(error, begins);
  }

  onAnswer(): void {
    if (!this.down) return;
    this.down = false;
    this.report.answersAgain();
  }

  /** A connection is ready. After the first, Redis may have restarted empty: every key is carried there again. */
  onReady(): void {
    if (this.connected) this.outages += 1;
    this.connected = true;
    this.onAnswer();
  }
}
