import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';

// Refused requests (4xx, and the 503s of overload: countAsRefusal) are stored
// as counts, one entry per route, status and minute, never one row per
// request: a flood of hostile requests would otherwise push real errors out
// of app_logs. Each refusal is still on the process's own output
// (plugins/errors.ts logs it with `persist: false`). Unknown URLs share one
// key, and the number of keys per minute is capped, so varying the URL
// cannot grow the table either. Requests Node's parser refused are counted
// too (`app.countRefusal`), under one key of their own.

declare module 'fastify' {
  interface FastifyInstance {
    /** Counts a refusal no route answered (Node's parser's), under `route`, in this minute's counts. */
    countRefusal(route: string, status: number): void;
  }
}

/** 5xx answers that are refusals, not failures (overload, shutdown): counted as the 4xx are. */
const refusedWith5xx = new WeakSet<FastifyRequest>();

/** Counts `request`'s 5xx answer as a refusal (plugins/errors.ts, for BusyError and its kind), not a failure. */
export function countAsRefusal(request: FastifyRequest): void {
  refusedWith5xx.add(request);
}

const UNKNOWN_ROUTE = '(unknown route)';
const OTHER_ROUTES = '(other routes)';
const MAX_KEYS_PER_MINUTE = 500;

export interface RefusalLogOptions {
  /** How often finished minutes are written (the current one waits until it ends, or until close). */
  flushIntervalMs?: number;
}

export default fp<RefusalLogOptions>(
  async function refusalLogPlugin(app: FastifyInstance, { flushIntervalMs = 5_000 }) {
    // minute (ISO) → "route|status" → count
    const minutes = new Map<string, Map<string, number>>();

    function count(route: string, status: number) {
      const minute = new Date(Math.floor(Date.now() / 60_000) * 60_000).toISOString();
      let counts = minutes.get(minute);
      if (!counts) minutes.set(minute, (counts = new Map()));
      let key = `${route}|${status}`;
      if (!counts.has(key) && counts.size >= MAX_KEYS_PER_MINUTE) key = `${OTHER_ROUTES}|${status}`;
      counts.set(key, (counts.get(key) ?? 0) + 1);
    }

    // A callback hook: it runs on every answer, and an async one costs a promise each time.
    app.addHook('onResponse', function countRefusal(request, reply, done) {
      const status = reply.statusCode;
      if ((status >= 400 && status < 500) || (status >= 500 && refusedWith5xx.has(request))) count(request.routeOptions.url ? `${request.method} ${request.routeOptions.url}` : UNKNOWN_ROUTE, status);
      done();
    });

    /** Logs each counted (route, status) of the minutes before `before` once; everything when `before` is omitted. */
    function write(before?: string) {
      for (const [minute, counts] of minutes) {
        if (before !== undefined && minute >= before) continue;
        minutes.delete(minute);
        for (const [key, count] of counts) {
          const cut = key.lastIndexOf('|');
          app.log.warn({ route: key.slice(0, cut), statusCode: Number(key.slice(cut + 1)), count, minute }, 'requests refused');
        }
      }
    }

    app.decorate('countRefusal', count);

    const timer = setInterval(() => write(new Date(Math.floor(Date.now() / 60_000) * 60_000).toISOString()), flushIntervalMs);
    timer.unref();
    // Registered after app-logs, so this runs first on close and app-logs then stores these lines.
    app.addHook('onClose', async () => {
      clearInterval(timer);
      write();
    });
  },
  { name: 'refusal-log', dependencies: ['app-logs'] },
);
