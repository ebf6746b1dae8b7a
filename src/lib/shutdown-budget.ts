// How SHUTDOWN_TIMEOUT_MS is shared on close. The process exits anyway when
// it runs out (server.ts), so no single step may take all of it: the
// analytics batcher drains first, the stored logs are flushed after it, and
// the pool closes last; each gets what the earlier ones leave.

export interface ShutdownBudget {
  /** The batcher's drain: writing queued events and waiting for ingestion requests. */
  drainMs: number;
  /** Storing the log entries still queued (and the refusal counts). */
  flushMs: number;
  /** Closing the pool: queries still running get this long before their connections are ended. */
  closeMs: number;
}

export function shutdownBudget(totalMs: number): ShutdownBudget {
  const flushMs = Math.min(2_000, Math.floor(totalMs * 0.2));
  const closeMs = Math.min(1_000, Math.floor(totalMs * 0.1));
  // What is left, less a margin for the steps in between.
  const drainMs = Math.max(0, Math.floor(totalMs * 0.95) - flushMs - closeMs);
  return { drainMs, flushMs, closeMs };
}
