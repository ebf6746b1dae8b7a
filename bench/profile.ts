import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import autocannon from 'autocannon';
import postgres from 'postgres';
import { startStack, uniqueDatabaseName } from '../scripts/stack/index.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { generateApiKey } from '../src/lib/api-keys.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { serviceNodeFlags } from '../scripts/service-flags.ts';
import { BENCH_BUILD, benchArgs, compiledServer, stopServer } from './load.ts';

// npm run bench:profile [-- --duration=10 --connections=50 --heap[=survivors]]
//
// Where a request's CPU time goes: the do-nothing POST route behind every
// plugin of the app (bench/server.ts), the same route on a bare Fastify, the
// ingestion route itself (a real event, with a forwarded public address and a
// campaign), and the feedback list (GET /api/feedback/get-feedback, a page of
// 20 of 1,000 rows, as bench:read's real route), each under V8's CPU profiler
// while autocannon (this process) loads it. The profiler runs over the measured
// load only (the server starts and stops it on a signal, bench/server.ts):
// start-up and warm-up would otherwise be divided among the measured requests.
// Prints self time per request, by package or source file and by function, and
// writes bench/results/profile.json; the .cpuprofile files can be opened in
// Chrome DevTools or speedscope for a flame graph. With --heap, the same loads
// run under V8's sampling heap profiler instead: the bytes allocated per
// request by where they were allocated (freed ones included), and what each
// scavenge kept and promoted, which is what a scavenge costs; written to
// bench/results/profile-heap.json and .cache/profiles/*.heapprofile. With
// --heap=survivors, only what outlived a scavenge, by where it was allocated
// (bench/results/profile-survivors.json).

const ROOT = path.resolve(import.meta.dirname, '..');
const args = benchArgs();
const DURATION_S = Number(args.duration ?? 10);
const CONNECTIONS = Number(args.connections ?? 50);
const KIND: 'cpu' | 'heap' = 'heap' in args ? 'heap' : 'cpu';
const SURVIVORS_ONLY = args.heap === 'survivors';
const log = (line: string) => console.log(`[bench:profile] ${line}`);
const round2 = (value: number) => Math.round(value * 100) / 100;

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface HeapProfileNode {
  callFrame: ProfileNode['callFrame'];
  selfSize: number;
  children: HeapProfileNode[];
}
interface HeapProfile {
  head: HeapProfileNode;
}
interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** What a frame belongs to: an npm package, one of our source files, Node itself, or V8 (GC, idle, program). */
function ownerOf(url: string, functionName: string): string {
  if (!url) return `(${functionName || 'native'})`;
  const file = url.replace(/^file:\/\//, '');
  const inModules = file.lastIndexOf('/node_modules/');
  if (inModules >= 0) {
    const rest = file.slice(inModules + '/node_modules/'.length).split('/');
    return rest[0].startsWith('@') ? `${rest[0]}/${rest[1]}` : rest[0];
  }
  if (file.startsWith('node:')) return 'node (internals)';
  // A compiled file is named by its source (.cache/bench-build/bench-server/src/app.js is src/app.ts); its line numbers stay the compiled file's.
  if (file.startsWith(BENCH_BUILD)) return path.relative(BENCH_BUILD, file).split(path.sep).slice(1).join('/').replace(/\.js$/, '.ts');
  if (file.startsWith(ROOT)) return path.relative(ROOT, file);
  return file;
}

/** Amounts (µs, bytes) per frame, summed by owner and by function. */
function tally(amounts: Iterable<[ProfileNode['callFrame'], number]>) {
  const byOwner = new Map<string, number>();
  const byFunction = new Map<string, number>();
  for (const [callFrame, amount] of amounts) {
    // The profiler's own start and stop (bench/server.ts) are not the server's work.
    if (amount === 0 || callFrame.url === 'node:inspector') continue;
    const owner = ownerOf(callFrame.url, callFrame.functionName);
    byOwner.set(owner, (byOwner.get(owner) ?? 0) + amount);
    const where = callFrame.url ? `${owner}:${callFrame.lineNumber + 1}` : owner;
    const name = `${callFrame.functionName || '(anonymous)'} ${where}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + amount);
  }
  return { byOwner, byFunction };
}

/** Self time in microseconds, summed by owner and by function. */
function selfTimes(profile: CpuProfile) {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<number, number>();
  profile.samples.forEach((id, index) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[index] ?? 0)));
  return tally([...self].map(([id, micros]) => [byId.get(id)!.callFrame, micros]));
}

/** Sampled bytes allocated, summed by owner and by function: the same keys as selfTimes. */
function selfBytes(profile: HeapProfile) {
  const frames: [ProfileNode['callFrame'], number][] = [];
  const pending = [profile.head];
  for (let node = pending.pop(); node; node = pending.pop()) {
    pending.push(...node.children);
    frames.push([node.callFrame, node.selfSize]);
  }
  return tally(frames);
}

type Mode = 'bare' | 'app' | 'ingest' | 'feedbackList';
const TITLES: Record<Mode, string> = {
  bare: 'Bare Fastify route',
  app: 'Do-nothing route behind every plugin',
  ingest: 'POST /api/analytics (validation, enrichment, group commit)',
  feedbackList: 'GET /api/feedback/get-feedback (a page of 20, the legacy admin token)',
};
const FEEDBACK_ROWS = 1000;

/** What autocannon sends in each mode. */
function requestOf(mode: Mode, websiteId: string, adminToken: string): Pick<autocannon.Options, 'method' | 'headers' | 'body'> & { path: string } {
  if (mode === 'feedbackList') {
    return { path: '/api/feedback/get-feedback?limit=20', method: 'GET', headers: { authorization: `Bearer ${adminToken}` } };
  }
  const body = JSON.stringify({
    websiteId,
    eventType: 'page_view',
    page: '/work?utm_source=newsletter&utm_medium=email&utm_campaign=launch',
    referrer: 'https://www.google.com/search',
    userAgent: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36',
    sessionId: 's-1',
  });
  const path = mode === 'app' ? '/bench/noop' : '/api/analytics';
  return { path, method: 'POST', headers: { 'content-type': 'application/json', 'x-forwarded-for': '193.99.144.80' }, body };
}

async function profileServer(mode: Mode, settings: Record<string, string>, dir: string, request: ReturnType<typeof requestOf>) {
  const serverMode = mode === 'bare' ? 'bare' : 'app';
  const profileFile = path.join(dir, `${mode}.${KIND}profile`);
  const child: ChildProcess = spawn(process.execPath, [...serviceNodeFlags(), await compiledServer('bench/server.ts'), serverMode, JSON.stringify(settings)], {
    cwd: ROOT,
    env: {
      ...process.env,
      [KIND === 'cpu' ? 'BENCH_CPU_PROFILE' : 'BENCH_HEAP_PROFILE']: profileFile,
      ...(SURVIVORS_ONLY ? { BENCH_HEAP_SURVIVORS: '1' } : {}),
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  // Stopped whatever happens: a run that failed (a non-2xx answer) left its server running.
  let result: autocannon.Result;
  try {
    result = await measure(mode, child, request);
  } finally {
    await stopServer(child);
  }
  const profile: unknown = JSON.parse(await readFile(profileFile, 'utf8'));
  const collections = KIND === 'heap' ? (JSON.parse(await readFile(`${profileFile}.gc.json`, 'utf8')) as Record<string, number>) : undefined;
  return { requests: result.requests.total, requestsPerSecond: Math.round(result.requests.average), profile, collections };
}

/** Warms the server up, then loads it for DURATION_S with its profiler on. */
async function measure(mode: Mode, child: ChildProcess, request: ReturnType<typeof requestOf>): Promise<autocannon.Result> {
  // The server prints a line when it listens and one after each SIGUSR2 (profiler on, profile written).
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const nextLine = async () => {
    const { value, done } = await lines.next();
    if (done) throw new Error(`${mode}: the server exited`);
    return JSON.parse(value) as { port?: number; profiling?: boolean };
  };
  const port = (await nextLine()).port ?? 0;
  const { path: requestPath, ...sent } = request;
  const url = `http://127.0.0.1:${port}${requestPath}`;
  const run = (duration: number) =>
    new Promise<autocannon.Result>((resolve, reject) =>
      autocannon({ url, ...sent, connections: CONNECTIONS, duration }, (error, result) => {
        if (error) return reject(error);
        // A profile of refusals would say nothing about the route.
        if (result.non2xx > 0 || result.errors > 0) return reject(new Error(`${mode}: ${result.non2xx} non-2xx answers, ${result.errors} errors`));
        resolve(result);
      }),
    );
  await run(2);
  // The profile spans the measured run alone: its requests are the ones counted.
  child.kill('SIGUSR2');
  await nextLine();
  const result = await run(DURATION_S);
  child.kill('SIGUSR2');
  await nextLine();
  return result;
}

/** The largest entries, each per request: µs of CPU, or KiB allocated. */
function table(entries: Map<string, number>, requests: number, top: number) {
  const unit = KIND === 'cpu' ? 'usPerRequest' : 'kibPerRequest';
  const scale = KIND === 'cpu' ? 1 : 1 / 1024;
  return [...entries]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([name, amount]) => ({ name, [unit]: round2((amount * scale) / requests) }) as { name: string } & Record<typeof unit, number>);
}

async function main() {
  const stack = await startStack({ databaseName: uniqueDatabaseName('portfolio_bench_profile'), keepDatabase: false, log });
  const work = await mkdtemp(path.join(tmpdir(), 'portfolio-profile-'));
  try {
    const settings = {
      NODE_ENV: 'production',
      LOG_LEVEL: 'silent',
      // The app logs in as `authenticator`, as in production (README, Least privilege).
      DATABASE_URL: asLoginRole(stack.databaseUrl),
      ADMIN_JWT_SECRET: randomBytes(32).toString('hex'),
      SUPABASE_JWT_SECRET: randomBytes(32).toString('hex'),
      // Production refuses to start without a bot check unless it is turned off by name.
      CAPTCHA_PROVIDER: 'off',
      ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
      RATE_LIMIT_GENERAL_PER_15MIN: '1000000000',
      RATE_LIMIT_INGEST_PER_15MIN: '1000000000',
      TRUST_PROXY: '1',
      FEEDBACK_OUTBOX_WORKER: 'false',
    };
    const results: Record<string, unknown> = {};
    const owner = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
    const key = generateApiKey();
    const [website] = await owner`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('Profile', 'profile.example.test', ${key.hash}, ${key.prefix}) returning id`;
    await owner`
      insert into public.feedback (name, email, comment, rating, category, created_at)
      select 'Reader ' || i, 'reader' || i || '@example.test', 'Seeded feedback number ' || i || ' for the profile.',
             1 + i % 5, 'General Feedback', now() - make_interval(secs => i)
        from generate_series(1, ${FEEDBACK_ROWS}) as i`;
    await owner.end();
    const adminToken = await signLegacyAdminToken(settings.ADMIN_JWT_SECRET, 'bench-profile');
    for (const mode of ['bare', 'app', 'ingest', 'feedbackList'] as const) {
      const dir = path.join(work, mode);
      await mkdir(dir, { recursive: true });
      log(`${mode}: ${DURATION_S} s at ${CONNECTIONS} connections under the ${KIND === 'cpu' ? 'CPU' : 'sampling heap'} profiler`);
      const { requests, requestsPerSecond, profile, collections } = await profileServer(mode, settings, dir, requestOf(mode, website.id as string, adminToken));
      const { byOwner, byFunction } = KIND === 'cpu' ? selfTimes(profile as CpuProfile) : selfBytes(profile as HeapProfile);
      const total = [...byOwner.values()].reduce((a, b) => a + b, 0);
      const idle = byOwner.get('((idle))') ?? 0;
      const owners = table(byOwner, requests, 20).filter((row) => row.name !== '((idle))');
      const functions = table(byFunction, requests, 25).filter((row) => !row.name.startsWith('((idle))'));
      if (KIND === 'cpu') {
        const busyPerRequest = round2((total - idle) / requests);
        console.log(`\n${TITLES[mode]}: ${requestsPerSecond} req/s, ${busyPerRequest} µs of CPU per request (idle excluded)`);
        results[mode] = { requestsPerSecond, requests, busyMicrosPerRequest: busyPerRequest, byOwner: owners, topFunctions: functions };
      } else {
        const kibPerRequest = round2(total / 1024 / requests);
        const gc = collections!;
        const scavenging = {
          scavengesPer1000Requests: round2((gc.scavenges / requests) * 1000),
          scavengeMsMean: round2(gc.scavengeMsMean),
          survivedKibMean: round2(gc.survivedKibMean),
          promotedKibMean: round2(gc.promotedKibMean),
          newSpaceKib: round2(gc.newSpaceKib),
          scavengeUsPerRequest: round2((gc.scavengeMsTotal * 1000) / requests),
          otherCollections: gc.otherCollections,
        };
        console.log(`\n${TITLES[mode]}: ${requestsPerSecond} req/s, ${kibPerRequest} KiB ${SURVIVORS_ONLY ? 'outlived a scavenge' : 'allocated'} per request`);
        console.log(
          `  scavenges: ${scavenging.scavengesPer1000Requests} per 1,000 requests, ${scavenging.scavengeMsMean} ms each (${scavenging.scavengeUsPerRequest} µs a request); ` +
            `each kept ${scavenging.survivedKibMean} KiB young and promoted ${scavenging.promotedKibMean} KiB (new space ${scavenging.newSpaceKib} KiB); ${gc.otherCollections} other collections`,
        );
        const sampled = SURVIVORS_ONLY ? { survivedScavengeKibPerRequest: kibPerRequest } : { allocatedKibPerRequest: kibPerRequest };
        results[mode] = { requestsPerSecond, requests, ...sampled, collections: scavenging, byOwner: owners, topFunctions: functions };
      }
      console.table(Object.fromEntries(owners.map(({ name, ...amount }) => [name, Object.values(amount)[0]])));
      console.table(Object.fromEntries(functions.map(({ name, ...amount }) => [name, Object.values(amount)[0]])));
      await mkdir(path.join(ROOT, '.cache/profiles'), { recursive: true });
      await writeFile(path.join(ROOT, `.cache/profiles/${mode}.${KIND}profile`), JSON.stringify(profile));
    }
    const resultsFile = `bench/results/${KIND === 'cpu' ? 'profile' : SURVIVORS_ONLY ? 'profile-survivors' : 'profile-heap'}.json`;
    await writeFile(
      path.join(ROOT, resultsFile),
      `${JSON.stringify({ date: new Date().toISOString(), durationSeconds: DURATION_S, connections: CONNECTIONS, ...results }, null, 2)}\n`,
    );
    log(`${resultsFile} written; .cache/profiles/{bare,app,ingest,feedbackList}.${KIND}profile open in Chrome DevTools (and the CPU ones in speedscope)`);
  } finally {
    await rm(work, { recursive: true, force: true });
    await stack.stop();
  }
}

await main();
