import { type PerformanceEntry, PerformanceObserver, constants, performance } from 'node:perf_hooks';
import v8 from 'node:v8';
import type { FastifyInstance } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { buildApp } from '../src/app.ts';
import { parseConfig } from '../src/config.ts';
import { ListFeedbackResponseSchema } from '../src/modules/feedback/schemas.ts';
import { createFeedbackService } from '../src/modules/feedback/service.ts';
import type { Caller } from '../src/plugins/auth.ts';

// The server process of bench/read.ts: the real application plus
// bench-only routes (registered through buildApp's `extend`), on loopback.
// The two feedback routes call the same service method, with the same
// response schema, as GET /api/feedback/get-feedback; only the caller
// differs, and so the database actor: an admin's claims under row-level
// security, or the legacy admin token's service_role, which bypasses it. Prints {"port": n} when listening.
//
// argv: settings (JSON, as process.env would hold them), the admin's user id.

const [settingsJson, adminUserId] = process.argv.slice(2);
const PAGE = { order: 'desc' as const, limit: 20, offset: 0 };

// Collections since the start, by kind: with the old generation's size, what
// bench/read.ts reads around a phase to tell how much of it outlived the young generation.
// Beside them, from a reading that asks for a full collection to the next: the
// longest pause of the thread for any collection (incremental marking steps
// included), and how long each request took from the moment the thread took
// it up (Node's 'request' event, its headers parsed) to its answer handed to
// the socket. A request's latency above that is time it waited for the thread.
// Recorded only between the two, so that the phases that read the RSS do not
// carry a list of every request.
const collections = { scavenges: 0, markCompacts: 0 };
let longestPauseMs = 0;
let servedMs: number[] | null = null;
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) {
    const kind = (entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
    if (kind === constants.NODE_PERFORMANCE_GC_MINOR) collections.scavenges += 1;
    else if (kind === constants.NODE_PERFORMANCE_GC_MAJOR) collections.markCompacts += 1;
    longestPauseMs = Math.max(longestPauseMs, entry.duration);
  }
}).observe({ entryTypes: ['gc'] });

/** The 99th percentile of the times served since the last reset, in ms (null without any). */
function servedP99Ms(): number | null {
  if (!servedMs?.length) return null;
  const sorted = servedMs.toSorted((a, b) => a - b);
  return Math.round(sorted[Math.ceil(sorted.length * 0.99) - 1] * 100) / 100;
}

const benchRoutes: FastifyPluginAsyncZod = async (app) => {
  const feedback = createFeedbackService({ db: app.db, captcha: { enabled: false, verify: async () => 'passed' } });
  const claims = { sub: adminUserId, role: 'authenticated', aud: 'authenticated', session_id: 'bench' };
  const underRls: Caller = { kind: 'user', userId: adminUserId, sessionId: 'bench', roles: ['admin'], claims };
  const withoutRls: Caller = { kind: 'legacy-admin', userId: 'bench', roles: ['admin'] };
  const schema = { response: { 200: ListFeedbackResponseSchema } };

  for (const [url, caller] of [['/bench/feedback/rls', underRls], ['/bench/feedback/no-rls', withoutRls]] as const) {
    app.get(url, { schema }, async () => {
      const { data, total } = await feedback.listFeedback(caller, PAGE);
      return { success: true as const, data, pagination: { total, limit: PAGE.limit, offset: PAGE.offset } };
    });
  }
  app.get('/bench/constant', async () => ({ success: true, data: { status: 'ok' } }));
  // Where the resident memory is: V8's heap spaces (committed and used), and what lives outside them.
  app.get('/bench/memory', async () => {
    // With --expose-gc (bench/read.ts starts the server so), a full collection first: what is live, not what awaits collection.
    (globalThis as { gc?: () => void }).gc?.();
    const mib = (bytes: number) => Math.round((bytes / 2 ** 20) * 10) / 10;
    const usage = process.memoryUsage();
    const spaces = Object.fromEntries(
      v8.getHeapSpaceStatistics().map((space) => [space.space_name, { committedMiB: mib(space.physical_space_size), usedMiB: mib(space.space_used_size) }]),
    );
    return { rssMiB: mib(usage.rss), heapTotalMiB: mib(usage.heapTotal), heapUsedMiB: mib(usage.heapUsed), externalMiB: mib(usage.external), arrayBuffersMiB: mib(usage.arrayBuffers), spaces };
  });
  app.get('/bench/gc', async (request) => {
    // ?collect=1: a full collection first, so a phase starts with only what is live in the old generation.
    const collect = (request.query as { collect?: string }).collect === '1';
    if (collect) {
      (globalThis as { gc?: () => void }).gc?.();
      // The observer hears of that collection a little later; counted before the phase, not in it.
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const oldSpace = v8.getHeapSpaceStatistics().find((space) => space.space_name === 'old_space');
    const reading = { ...collections, oldSpaceUsedBytes: oldSpace?.space_used_size ?? 0, longestPauseMs: Math.round(longestPauseMs * 100) / 100, servedP99Ms: servedP99Ms() };
    // A reading with ?collect=1 starts a phase's record of pauses and times served; the next reading ends it.
    longestPauseMs = 0;
    servedMs = collect ? [] : null;
    return reading;
  });
};

const app = await buildApp(
  { config: parseConfig(JSON.parse(settingsJson)) },
  { extend: async (instance: FastifyInstance) => instance.register(benchRoutes) },
);
app.server.prependListener('request', (request, response) => {
  if (servedMs === null || request.url?.startsWith('/bench/gc')) return;
  const tookUp = performance.now();
  response.once('finish', () => servedMs?.push(performance.now() - tookUp));
});
await app.listen({ port: 0, host: '127.0.0.1' });
const address = app.server.address();
console.log(JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0, pid: process.pid }));
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
