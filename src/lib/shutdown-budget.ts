// How SHUTDOWN_TIMEOUT_MS is shared on close. The process exits anyway when
// it runs out (server.ts), so no single step may take all of it: the
// analytics batcher drains first, the stored logs are flushed after it, and
// the pool closes last; each gets what the earlier ones leave.
//
// The onClose steps only start once the server has closed, and it closes when
// its last request ends, so requests in flight are bounded too, inside the
// drain's share (which starts at the signal): streamed replies (CSV downloads,
// the dashboard's event stream) are cut at responsesMs, leaving the drain the
// rest of its share; what is still open at connectionsMs has its connection
// closed. In order: responsesMs ≤ drainMs ≤ connectionsMs, and
// connectionsMs + flushMs + closeMs ≤ totalMs.

export interface ShutdownBudget {
  /** Streamed replies still being sent this long after the signal are cut (the client sees a cut download). */
  responsesMs: number;
  /** The batcher's drain: writing queued events and waiting for ingestion requests. */
  drainMs: number;
  /** Connections still open this long after the signal are closed, so the server closes and the onClose steps run. */
  connectionsMs: number;
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
  // Half of the drain's share: a download is not worth the events still queued.
  const responsesMs = Math.floor(drainMs / 2);
  // Half the margin after the drain's end, so the 503s its end gives to callers still waiting are written first.
  const connectionsMs = drainMs + Math.floor((totalMs - drainMs - flushMs - closeMs) / 2);
  return { responsesMs, drainMs, connectionsMs, flushMs, closeMs };
}
