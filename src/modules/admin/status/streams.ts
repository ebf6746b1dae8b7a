import type { PassThrough } from 'node:stream';

// The dashboard's open event streams: a few per admin (a new one ends that
// admin's oldest, usually a reloaded page's), and all of them ended when the
// server closes, since an open stream would keep it from closing.

export type StopStream = (reason?: string) => void;

export function createStreamRegistry(maxPerAdmin: number) {
  const streams = new Set<PassThrough>();
  // "kind:userId" → the stop function of each of that admin's open streams, oldest first.
  const byAdmin = new Map<string, Set<StopStream>>();

  function addStream(admin: string, stream: PassThrough, stop: StopStream) {
    streams.add(stream);
    const mine = byAdmin.get(admin) ?? new Set<StopStream>();
    byAdmin.set(admin, mine);
    while (mine.size >= maxPerAdmin) mine.values().next().value?.('too many open streams for this admin');
    mine.add(stop);
  }

  function removeStream(admin: string, stream: PassThrough, stop: StopStream) {
    streams.delete(stream);
    byAdmin.get(admin)?.delete(stop);
    if (byAdmin.get(admin)?.size === 0) byAdmin.delete(admin);
  }

  function endAll() {
    for (const stream of streams) stream.end();
  }

  return { addStream, removeStream, endAll };
}
