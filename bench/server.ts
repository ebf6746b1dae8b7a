import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
import { GCProfiler } from 'node:v8';
import Fastify, { type FastifyInstance } from 'fastify';
import { buildApp } from '../src/app.ts';
import { parseConfig } from '../src/config.ts';

// The process under test, apart from the load generator: `app` is the real
// application (POST /api/analytics and the query routes), `bare` a Fastify
// route that parses the same JSON body and answers the same shape without
// doing anything (the HTTP ceiling). The app also gets POST /bench/noop,
// the same do-nothing answer behind every plugin of the app (the ceiling of
// the app's plugin stack). Prints {"port": n} when listening.

const [mode, settingsJson] = process.argv.slice(2);

function answerWithoutWork(app: FastifyInstance, url: string) {
  app.post(url, async (_request, reply) =>
    reply.status(201).send({ success: true, message: 'Event recorded', data: { id: randomUUID(), timestamp: new Date().toISOString() } }),
  );
}

async function start() {
  if (mode === 'bare') {
    const app = Fastify({ logger: false });
    answerWithoutWork(app, '/api/analytics');
    await app.listen({ port: 0, host: '127.0.0.1' });
    return app;
  }
  const app = await buildApp(
    { config: parseConfig(JSON.parse(settingsJson)) },
    { extend: async (instance) => answerWithoutWork(instance, '/bench/noop') },
  );
  await app.listen({ port: 0, host: '127.0.0.1' });
  return app;
}

/**
 * For bench:profile: with BENCH_CPU_PROFILE set, SIGUSR2 starts V8's CPU
 * profiler (1 ms samples, as `--cpu-prof`) and the next SIGUSR2 stops it and
 * writes the profile there, so it holds the measured load alone: neither the
 * start (module loading) nor the warm-up. With BENCH_HEAP_PROFILE set instead,
 * the same signals drive V8's sampling heap profiler (a sample every 32 KiB
 * allocated, objects the collectors have freed kept in it): what the load
 * allocates, and beside it (FILE.gc.json) what each collection kept: a
 * scavenge's work is what survives it, not what was allocated. With
 * BENCH_HEAP_SURVIVORS set too, the samples the scavenger freed are left out:
 * the profile shows where what outlived a scavenge was allocated. Each step
 * prints a line.
 */
function profileOnSignal(kind: 'cpu' | 'heap', file: string) {
  const session = new Session();
  session.connect();
  let running = false;
  const collections = new GCProfiler();
  process.on('SIGUSR2', async () => {
    if (!running) {
      running = true;
      if (kind === 'cpu') {
        await session.post('Profiler.enable');
        await session.post('Profiler.setSamplingInterval', { interval: 1000 });
        await session.post('Profiler.start');
      } else {
        await session.post('HeapProfiler.enable');
        await session.post('HeapProfiler.startSampling', {
          samplingInterval: 32 * 1024,
          includeObjectsCollectedByMajorGC: true,
          includeObjectsCollectedByMinorGC: !process.env.BENCH_HEAP_SURVIVORS,
        });
        collections.start();
      }
      console.log(JSON.stringify({ profiling: true }));
      return;
    }
    const { profile } = kind === 'cpu' ? await session.post('Profiler.stop') : await session.post('HeapProfiler.stopSampling');
    await writeFile(file, JSON.stringify(profile));
    if (kind === 'heap') await writeFile(`${file}.gc.json`, JSON.stringify(summarizeCollections(collections.stop()?.statistics ?? [])));
    console.log(JSON.stringify({ profiling: false }));
  });
}

type Collection = { gcType: string; cost: number; beforeGC: HeapAt; afterGC: HeapAt };
type HeapAt = { heapSpaceStatistics: { spaceName: string; spaceSize: number; spaceUsedSize: number }[] };

/** Scavenges: how many, their pauses, what each kept young and what it promoted; the other collections counted. */
function summarizeCollections(statistics: Collection[]) {
  const space = (at: HeapAt, name: string) => at.heapSpaceStatistics.find((entry) => entry.spaceName === name);
  const used = (at: HeapAt, name: string) => space(at, name)?.spaceUsedSize ?? 0;
  const scavenges = statistics.filter((entry) => entry.gcType === 'Scavenge');
  const others = statistics.filter((entry) => entry.gcType !== 'Scavenge');
  const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : 0);
  return {
    scavenges: scavenges.length,
    scavengeMsTotal: scavenges.reduce((sum, entry) => sum + entry.cost, 0) / 1000,
    scavengeMsMean: mean(scavenges.map((entry) => entry.cost)) / 1000,
    survivedKibMean: mean(scavenges.map((entry) => used(entry.afterGC, 'new_space'))) / 1024,
    promotedKibMean: mean(scavenges.map((entry) => used(entry.afterGC, 'old_space') - used(entry.beforeGC, 'old_space'))) / 1024,
    newSpaceKib: Math.max(0, ...scavenges.map((entry) => space(entry.beforeGC, 'new_space')?.spaceSize ?? 0)) / 1024,
    otherCollections: others.length,
    otherMsTotal: others.reduce((sum, entry) => sum + entry.cost, 0) / 1000,
  };
}

if (process.env.BENCH_CPU_PROFILE) profileOnSignal('cpu', process.env.BENCH_CPU_PROFILE);
else if (process.env.BENCH_HEAP_PROFILE) profileOnSignal('heap', process.env.BENCH_HEAP_PROFILE);
const app = await start();
const address = app.server.address();
console.log(JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 }));
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
