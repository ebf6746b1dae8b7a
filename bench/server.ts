import { randomUUID } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { Session } from 'node:inspector/promises';
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
 * start (module loading) nor the warm-up. Each step prints a line.
 */
function profileOnSignal(file: string) {
  const session = new Session();
  session.connect();
  let running = false;
  process.on('SIGUSR2', async () => {
    if (!running) {
      running = true;
      await session.post('Profiler.enable');
      await session.post('Profiler.setSamplingInterval', { interval: 1000 });
      await session.post('Profiler.start');
      console.log(JSON.stringify({ profiling: true }));
      return;
    }
    const { profile } = await session.post('Profiler.stop');
    await writeFile(file, JSON.stringify(profile));
    console.log(JSON.stringify({ profiling: false }));
  });
}

if (process.env.BENCH_CPU_PROFILE) profileOnSignal(process.env.BENCH_CPU_PROFILE);
const app = await start();
const address = app.server.address();
console.log(JSON.stringify({ port: typeof address === 'object' && address ? address.port : 0 }));
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
