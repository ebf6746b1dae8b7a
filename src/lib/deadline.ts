// One race against a timer, for the calls that must not wait on a service
// for ever (a pooled connection, the auth server, Redis).

/**
 * `work`, or the error `expire()` gives when it has not settled within `ms`
 * (none, and the race waits on, when `expire` returns undefined). The timer
 * ends with the race.
 *
 * A timer that fires late, after the event loop stalled (2–3 s under load),
 * runs before that turn's I/O is read: the answer may be in the socket
 * already, and /health said 503 of a database that had answered. So the
 * deadline reads pending I/O once more (one turn, setImmediate: after the
 * poll phase) and expires only if `work` has still not settled.
 */
export async function withinDeadline<T>(work: Promise<T>, ms: number, expire: () => Error | undefined): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  let lastLook: NodeJS.Immediate | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      lastLook = setImmediate(() => {
        const error = expire();
        if (error) reject(error);
      });
    }, ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
    // Settled in that last turn: the race is won, and expire() must not run (it cancels, it marks as late).
    clearImmediate(lastLook);
  }
}

/** Whether `work` settles (either way) within `ms`; it runs on regardless. For waits a shutdown gives up on. */
export async function settlesWithin(work: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => (timer = setTimeout(resolve, ms, false)));
  try {
    return await Promise.race([work.then(() => true, () => true), late]);
  } finally {
    clearTimeout(timer);
  }
}
