import type { PassThrough } from 'node:stream';

// The dashboard's open event streams: a few per admin (a new one ends that
// admin's oldest, usually a reloaded page's), and all of them ended when the
// server closes, since an open stream would keep it from closing.

/**
 * Why the server ends a stream. `event: end` carries the code, for the page to
 * act on (it stops for good only when `replaced`: reconnecting would push out
 * the admin's next tab), and the text, for a person reading the stream.
 */
export const END_REASONS = {
  replaced: 'too many open streams for this admin',
  'signed-out': 'signed out or no longer an admin',
  closing: 'the server is shutting down',
} as const;
export type EndReason = keyof typeof END_REASONS;

export type StopStream = (reason?: EndReason) => void;

export function createStreamRegistry(maxPerAdmin: number) {
  // Each open stream's stop function: it ends the stream, or destroys it when its client is behind.
  const streams = new Map<PassThrough, StopStream>();
  // "kind:userId" → the stop function of each of that admin's open streams, oldest first.
  const byAdmin = new Map<string, Set<StopStream>>();
  let closing = false;

  function addStream(admin: string, stream: PassThrough, stop: StopStream) {
    // Its request was still being authorized when endAll() ran: ended as soon
    // as its handler has sent it (the handler still writes to it after this).
    if (closing) return void setImmediate(() => stop('closing'));
    streams.set(stream, stop);
    const mine = byAdmin.get(admin) ?? new Set<StopStream>();
    byAdmin.set(admin, mine);
    while (mine.size >= maxPerAdmin) mine.values().next().value?.('replaced');
    mine.add(stop);
  }

  function removeStream(admin: string, stream: PassThrough, stop: StopStream) {
    streams.delete(stream);
    byAdmin.get(admin)?.delete(stop);
    if (byAdmin.get(admin)?.size === 0) byAdmin.delete(admin);
  }

  /** Stops every open stream, and every one opened from now on. */
  function endAll() {
    closing = true;
    // stop(), not stream.end(): ending waits for the client to take the buffer, and one that is behind may never take it.
    for (const stop of [...streams.values()]) stop('closing');
  }

  return { addStream, removeStream, endAll };
}
