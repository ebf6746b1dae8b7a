// Exponential backoff for retries (notifications, deletion batches): base, 2 × base, 4 × base, …
// capped at max, each spread by ±20% so instances that failed together do
// not retry together.

export interface BackoffPolicy {
  baseMs: number;
  maxMs: number;
}

/** Delay before the next try, after `attempts` (>= 1) failed tries. */
export function retryDelayMs(attempts: number, { baseMs, maxMs }: BackoffPolicy, random: () => number = Math.random): number {
  const exponential = baseMs * 2 ** Math.max(0, attempts - 1);
  const jittered = Math.min(maxMs, exponential) * (0.8 + 0.4 * random());
  return Math.round(Math.min(maxMs, jittered));
}
