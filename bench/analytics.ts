import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import autocannon from 'autocannon';
import postgres from 'postgres';
import { startStack, uniqueDatabaseName } from '../scripts/stack/index.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { addDays, utcDay } from '../src/modules/analytics/dates.ts';
import { uuidv7 } from '../src/modules/analytics/ids.ts';
import { insertEventBatchElevated } from '../src/modules/analytics/ingest-queries.ts';
import { getTopPages } from '../src/modules/analytics/queries.ts';
import { generateApiKey } from '../src/lib/api-keys.ts';
import { benchArgs, compiledServer, goal, keepsTo, percentile, printGoals, ratio, ratioGoal, serverCpuPerRequest, settingOverrides, stopServer } from './load.ts';
import { seedEvents } from './seed.ts';
import { serviceNodeFlags } from '../scripts/service-flags.ts';

// npm run bench [-- --scales=1000000,10000000 --duration=10 --rounds=3 --connections=100 --set=NAME=value,...]
//
// 1. Ingestion: a bare Fastify POST route with the same body (the HTTP
//    ceiling), a do-nothing route behind all of the app's plugins,
//    POST /api/analytics, and the same app writing one INSERT per request,
//    with autocannon on loopback at pipelining 1, in rounds (medians); then
//    every acknowledged id must be found in the table.
// 2. Queries: summary, daily series and top pages over 1M and 10M seeded
//    events in one website each, served from the rollups.
// Starts its own stack (a fresh database, dropped at the end); the servers
// run in child processes, apart from the load generator.

const ROOT = path.resolve(import.meta.dirname, '..');
const args = benchArgs();
const SCALES = (args.scales ?? '1000000,10000000').split(',').map(Number).filter((events) => events > 0);
const DURATION_S = Number(args.duration ?? 10);
const WARMUP_S = 3;
const CONNECTIONS = Number(args.connections ?? 100);
const QUERY_RUNS = 30;
const ROUNDS = Number(args.rounds ?? 3);
/** --set=NAME=value,NAME=value: settings of the app under test (e.g. ANALYTICS_BATCH_MAX_WAIT_MS=10), to try a tuning in the same harness. */
const OVERRIDES = settingOverrides(args);

const AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15',
  'Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1',
];

const log = (line: string) => console.log(`[bench] ${line}`);

async function startServer(mode: 'bare' | 'app', settings: Record<string, string> = {}): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [...serviceNodeFlags(), await compiledServer('bench/server.ts'), mode, JSON.stringify(settings)], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! });
  for await (const line of lines) {
    const port = (JSON.parse(line) as { port: number }).port;
    return { url: `http://127.0.0.1:${port}`, child };
  }
  throw new Error(`${mode} server exited before listening`);
}

interface LoadResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  total: number;
  non2xx: number;
  errors: number;
  acknowledgedIds: string[];
}

/** Varied bodies (sessions of 8 events, 50 pages, 4 agents, half with a userId), the same for both servers. */
async function load(url: string, websiteId: string, duration: number, route = '/api/analytics'): Promise<LoadResult> {
  let sent = 0;
  const acknowledgedIds: string[] = [];
  const result = await autocannon({
    url,
    connections: CONNECTIONS,
    pipelining: 1,
    duration,
    requests: [
      {
        method: 'POST',
        path: route,
        setupRequest: (request) => {
          sent += 1;
          // The client's address as a proxy forwards it (the servers trust one hop), so
          // every event takes a real country lookup; one in ten pages carries a campaign.
          request.headers = { 'content-type': 'application/json', 'x-forwarded-for': CLIENT_IPS[sent % CLIENT_IPS.length] };
          request.body = JSON.stringify({
            websiteId,
            eventType: sent % 5 === 0 ? 'click' : 'page_view',
            page: sent % 10 === 0 ? `/page/${sent % 50}?utm_source=newsletter&utm_medium=email&utm_campaign=launch-${sent % 3}` : `/page/${sent % 50}`,
            referrer: sent % 8 === 0 ? 'https://www.google.com/search' : undefined,
            userAgent: AGENTS[sent % AGENTS.length],
            sessionId: `bench-${Math.floor(sent / 8)}`,
            userId: sent % 2 === 0 ? `member-${sent % 5000}` : undefined,
            metadata: { loadTime: sent % 1000, screen: '1920x1080' },
          });
          return request;
        },
        onResponse: (status, body) => {
          if (status === 201) acknowledgedIds.push((JSON.parse(body) as { data: { id: string } }).data.id);
        },
      },
    ],
  });
  return {
    requestsPerSecond: Math.round(result.requests.average),
    p50Ms: result.latency.p50,
    p99Ms: result.latency.p99,
    total: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors,
    acknowledgedIds,
  };
}

async function countStored(sql: postgres.Sql, ids: string[]): Promise<number> {
  let found = 0;
  for (let from = 0; from < ids.length; from += 50_000) {
    const [row] = await sql`select count(*)::int as n from public.analytics_events where id = any(${ids.slice(from, from + 50_000)}::uuid[])`;
    found += row.n;
  }
  return found;
}

async function createWebsite(sql: postgres.Sql, name: string) {
  const key = generateApiKey();
  const [row] = await sql`
    insert into public.websites (name, domain, api_key_hash, api_key_prefix)
    values (${name}, 'bench.example.test', ${key.hash}, ${key.prefix}) returning id`;
  return { id: row.id as string, apiKey: key.key };
}

/** The run with the median throughput (its latencies come with it). */
function medianRun(results: LoadResult[]): LoadResult {
  const sorted = [...results].sort((a, b) => a.requestsPerSecond - b.requestsPerSecond);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

async function time(runs: number, work: () => Promise<unknown>) {
  for (let i = 0; i < 3; i += 1) await work();
  const samples: number[] = [];
  for (let i = 0; i < runs; i += 1) {
    const started = performance.now();
    await work();
    samples.push(performance.now() - started);
  }
  samples.sort((a, b) => a - b);
  const round = (value: number) => Math.round(value * 100) / 100;
  return { p50Ms: round(percentile(samples, 50)), p95Ms: round(percentile(samples, 95)), maxMs: round(samples[samples.length - 1]) };
}

interface SummaryBody {
  data: { pageViews: number; uniqueVisitors: number; sessions: number; bounceRate: number };
}

async function getCsv(url: string, adminToken: string): Promise<string> {
  const response = await fetch(url, { headers: { authorization: `Bearer ${adminToken}` } });
  const text = await response.text();
  if (response.status !== 200 || !text.startsWith('date,')) throw new Error(`${url}: ${response.status} ${text.slice(0, 200)}`);
  return text;
}

async function getJson(url: string, apiKey: string): Promise<SummaryBody> {
  const response = await fetch(url, { headers: { 'x-api-key': apiKey } });
  if (response.status !== 200) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  return (await response.json()) as SummaryBody;
}

/** The database write path alone (no HTTP): sequential batches of `size` through the same INSERT. */
async function writePath(sql: postgres.Sql, websiteId: string, size: number, batches = 100) {
  let n = 0;
  const batch = () =>
    Array.from({ length: size }, () => {
      n += 1;
      return {
        id: uuidv7(),
        websiteId,
        eventType: n % 5 === 0 ? 'click' : 'page_view',
        page: `/page/${n % 50}`,
        referrer: null,
        referrerHost: n % 8 === 0 ? 'google.com' : null,
        userAgent: AGENTS[n % AGENTS.length],
        deviceType: 'desktop',
        sessionId: `write-path-${Math.floor(n / 8)}`,
        userId: null,
        visitorId: `visitor-${n % 5000}`,
        // Every event has a country and one in ten a campaign, as ingestion now stores them.
        country: BENCH_COUNTRIES[n % BENCH_COUNTRIES.length],
        utmSource: n % 10 === 0 ? 'newsletter' : null,
        utmMedium: n % 10 === 0 ? 'email' : null,
        utmCampaign: n % 10 === 0 ? `launch-${n % 3}` : null,
        metadata: { loadTime: n % 1000 },
        createdAt: new Date().toISOString(),
      };
    });
  for (let i = 0; i < 10; i += 1) await insertEventBatchElevated(sql, batch());
  const started = performance.now();
  for (let i = 0; i < batches; i += 1) await insertEventBatchElevated(sql, batch());
  const msPerBatch = (performance.now() - started) / batches;
  return { batchSize: size, msPerBatch: Math.round(msPerBatch * 100) / 100, eventsPerSecond: Math.round((size / msPerBatch) * 1000) };
}

const BENCH_COUNTRIES = ['US', 'DE', 'GB', 'FR', 'IN', 'BR', 'JP', 'NL'];
/** Public addresses of well-known networks in several countries (resolvers, universities, carriers). */
const CLIENT_IPS = ['8.8.8.8', '1.1.1.1', '9.9.9.9', '193.99.144.80', '212.58.244.22', '194.153.205.26', '203.0.113.9', '200.160.2.3', '133.11.0.1', '145.97.39.155', '2001:4860:4860::8888', '2a00:1450:4001:80b::200e'];

async function main() {
  const stack = await startStack({ databaseName: uniqueDatabaseName('portfolio_bench'), keepDatabase: false, log });
  const sql = postgres(stack.databaseUrl, { max: 4, onnotice: () => {} });
  const children: ChildProcess[] = [];
  try {
    const [pg] = await sql`select current_setting('server_version') as version`;
    const adminSecret = randomBytes(32).toString('hex');
    const adminToken = await signLegacyAdminToken(adminSecret, 'bench-admin');
    const settings = {
      NODE_ENV: 'development',
      LOG_LEVEL: 'silent',
      // The app logs in as `authenticator`, as in production (README, Least privilege).
      DATABASE_URL: asLoginRole(stack.databaseUrl),
      ADMIN_JWT_SECRET: adminSecret,
      ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
      RATE_LIMIT_GENERAL_PER_15MIN: '1000000000',
      RATE_LIMIT_INGEST_PER_15MIN: '1000000000',
      // The load generator stands in for a proxy: it forwards public client addresses.
      TRUST_PROXY: '1',
      ...OVERRIDES,
    };

    // 1. Ingestion. Four targets, all running from the start: the bare route,
    // the app's ingest route, its do-nothing route, and the same app writing one
    // INSERT per request: the design of the self-hosted analytics peers (batches
    // of one row, as many in flight as the pool has connections; everything else
    // equal). Measured in ROUNDS rounds, the order turned each round, and the
    // median taken: the machine is shared, and a figure taken once is noise.
    const ingestSite = await createWebsite(sql, 'Ingest');
    const bare = await startServer('bare');
    const app = await startServer('app', settings);
    const perRequest = await startServer('app', { ...settings, ANALYTICS_BATCH_MAX_ROWS: '1', ANALYTICS_BATCH_MAX_IN_FLIGHT: '10', DATABASE_POOL_MAX: '10' });
    children.push(bare.child, app.child, perRequest.child);
    type Target = 'bare' | 'noop' | 'ingest' | 'perRequest';
    const targets: Record<Target, { url: string; pid: number; route?: string }> = {
      bare: { url: bare.url, pid: bare.child.pid! },
      noop: { url: app.url, pid: app.child.pid!, route: '/bench/noop' },
      ingest: { url: app.url, pid: app.child.pid! },
      perRequest: { url: perRequest.url, pid: perRequest.child.pid! },
    };
    const order = Object.keys(targets) as Target[];
    for (const name of order) await load(targets[name].url, ingestSite.id, WARMUP_S, targets[name].route);
    // Each run also carries the server process's CPU (all threads) per request; PostgreSQL's is not in it.
    const runs: Record<Target, (LoadResult & { serverCpuUsPerRequest: number })[]> = { bare: [], noop: [], ingest: [], perRequest: [] };
    for (let round = 0; round < ROUNDS; round += 1) {
      const turned = [...order.slice(round % order.length), ...order.slice(0, round % order.length)];
      for (const name of turned) {
        log(`round ${round + 1}/${ROUNDS}: ${name}, ${DURATION_S}s at ${CONNECTIONS} connections`);
        const { url, route, pid } = targets[name];
        const { result, cpuUsPerRequest } = await serverCpuPerRequest(pid, () => load(url, ingestSite.id, DURATION_S, route), (run) => run.total);
        runs[name].push({ ...result, serverCpuUsPerRequest: cpuUsPerRequest });
      }
    }
    await stopServer(bare.child);
    await stopServer(perRequest.child);
    const bareResult = medianRun(runs.bare);
    const noopResult = medianRun(runs.noop);
    const appResult = medianRun(runs.ingest);
    const perRequestResult = medianRun(runs.perRequest);
    // Every event any round acknowledged must be in the table.
    const acknowledged = runs.ingest.flatMap((run) => run.acknowledgedIds);
    const perRequestAcknowledged = runs.perRequest.flatMap((run) => run.acknowledgedIds);
    const stored = await countStored(sql, acknowledged);
    const perRequestStored = await countStored(sql, perRequestAcknowledged);
    log(`acknowledged ${acknowledged.length}, found in the table ${stored}; one INSERT per request: ${perRequestAcknowledged.length}, ${perRequestStored}`);

    const writePaths = [];
    for (const size of [50, 100, 500]) writePaths.push(await writePath(sql, ingestSite.id, size));
    log(`write path alone: ${writePaths.map((w) => `${w.batchSize}/batch ${w.eventsPerSecond} events/s`).join(', ')}`);

    const ingest = {
      connections: CONNECTIONS,
      pipelining: 1,
      durationSeconds: DURATION_S,
      bare: { ...bareResult, acknowledgedIds: undefined },
      appPluginStackNoop: { ...noopResult, acknowledgedIds: undefined },
      rounds: ROUNDS,
      runsRequestsPerSecond: Object.fromEntries(order.map((name) => [name, runs[name].map((run) => run.requestsPerSecond)])),
      runsServerCpuUsPerRequest: Object.fromEntries(order.map((name) => [name, runs[name].map((run) => run.serverCpuUsPerRequest)])),
      serverCpuUsPerRequest: Object.fromEntries(order.map((name) => [name, percentile(runs[name].map((run) => run.serverCpuUsPerRequest).sort((a, b) => a - b), 50)])) as Record<Target, number>,
      analytics: { ...appResult, acknowledgedIds: undefined, acknowledged: acknowledged.length, foundInTable: stored },
      perRequestInsert: { ...perRequestResult, acknowledgedIds: undefined, acknowledged: perRequestAcknowledged.length, foundInTable: perRequestStored },
      pluginStackRatio: ratio(noopResult.requestsPerSecond, bareResult.requestsPerSecond),
      ratio: ratio(appResult.requestsPerSecond, bareResult.requestsPerSecond),
      ratioToAppPluginStack: ratio(appResult.requestsPerSecond, noopResult.requestsPerSecond),
      ratioToPerRequestInsert: ratio(appResult.requestsPerSecond, perRequestResult.requestsPerSecond),
      acknowledgedEqualsCommitted: stored === acknowledged.length && perRequestStored === perRequestAcknowledged.length,
      // The goals on the three ratios above, judged before rounding.
      met: {
        pluginStack: keepsTo(noopResult.requestsPerSecond, bareResult.requestsPerSecond, { atLeast: 0.8 }),
        ingest: keepsTo(appResult.requestsPerSecond, bareResult.requestsPerSecond, { atLeast: 0.5 }),
        perRequestInsert: keepsTo(appResult.requestsPerSecond, perRequestResult.requestsPerSecond, { atLeast: 3 }),
      },
      writePathAlone: writePaths,
    };

    // 2. Queries at scale, and the tracker script once (it does not depend on the data).
    const trackerScriptHttp = await time(QUERY_RUNS, async () => {
      const response = await fetch(`${app.url}/script.js`);
      if (response.status !== 200) throw new Error(`/script.js: ${response.status}`);
      return response.text();
    });
    const queries = [];
    const today = utcDay(new Date());
    for (const events of SCALES) {
      const site = await createWebsite(sql, `Seeded ${events}`);
      const started = performance.now();
      await seedEvents(sql, { websiteId: site.id, events, onProgress: (done) => log(`seeding ${events}: ${done} events, ${((performance.now() - started) / 1000).toFixed(0)}s`) });
      const seedSeconds = Math.round((performance.now() - started) / 1000);
      const range = { websiteId: site.id, startDate: addDays(today, -29), endDate: today };
      const summaryUrl = `${app.url}/api/analytics?websiteId=${site.id}`;
      const seriesUrl = `${app.url}/api/analytics/date-range?websiteId=${site.id}`;
      const summary = (await getJson(summaryUrl, site.apiKey)).data;
      const result = {
        events,
        seedSeconds,
        summaryHttp: await time(QUERY_RUNS, () => getJson(summaryUrl, site.apiKey)),
        dailySeriesHttp: await time(QUERY_RUNS, () => getJson(seriesUrl, site.apiKey)),
        topPagesSql: await time(QUERY_RUNS, () => sql.begin((tx) => getTopPages(tx, range, 10))),
        realtimeHttp: await time(QUERY_RUNS, () => getJson(`${app.url}/api/analytics/realtime?websiteId=${site.id}`, site.apiKey)),
        dailySeriesCsvHttp: await time(QUERY_RUNS, () => getCsv(`${app.url}/api/analytics/date-range/export?websiteId=${site.id}`, adminToken)),
        rawScanForComparisonMs: 0,
        summary: { pageViews: summary.pageViews, uniqueVisitors: summary.uniqueVisitors, sessions: summary.sessions, bounceRate: summary.bounceRate },
      };
      // What the same distinct counts cost from the raw events, once, for comparison.
      const rawStarted = performance.now();
      await sql`
        select count(*) filter (where event_type = 'page_view'), count(distinct visitor_id), count(distinct session_id)
          from public.analytics_events
         where website_id = ${site.id} and created_at >= ${range.startDate}::date`;
      result.rawScanForComparisonMs = Math.round(performance.now() - rawStarted);
      log(`${events} events: summary p50 ${result.summaryHttp.p50Ms} ms, series p50 ${result.dailySeriesHttp.p50Ms} ms, top pages p50 ${result.topPagesSql.p50Ms} ms, raw scan ${result.rawScanForComparisonMs} ms`);
      queries.push(result);
    }

    const machine = {
      cpus: os.cpus().length,
      cpuModel: os.cpus()[0]?.model ?? 'unknown',
      memoryGiB: Math.round(os.totalmem() / 2 ** 30),
      node: process.version,
      postgres: pg.version as string,
      platform: `${os.platform()} ${os.release()}`,
      note: 'load generator, servers and PostgreSQL share the same cores; PostgreSQL default settings, synchronous_commit on',
    };
    const report = { date: new Date().toISOString(), machine, ingest, trackerScriptHttp, queries };
    await mkdir(path.join(ROOT, 'bench/results'), { recursive: true });
    await writeFile(path.join(ROOT, 'bench/results/analytics.json'), `${JSON.stringify(report, null, 2)}\n`);

    console.log(`\nMachine: ${machine.cpus} × ${machine.cpuModel}, ${machine.memoryGiB} GiB, Node ${machine.node}, PostgreSQL ${machine.postgres}`);
    const rate = (m: { requestsPerSecond: number; p50Ms: number; p99Ms: number; non2xx: number }, unit = 'req/s') =>
      `${m.requestsPerSecond.toLocaleString('en')} ${unit}, p50 ${m.p50Ms} ms, p99 ${m.p99Ms} ms${m.non2xx ? `, ${m.non2xx} non-2xx` : ''}`;
    const cpu = ingest.serverCpuUsPerRequest;
    printGoals(`npm run bench: ingestion at ${CONNECTIONS} connections, pipelining 1, median of ${ROUNDS} rounds of ${DURATION_S} s; queries over the last 30 days`, [
      goal('bare Fastify route, same body', rate(bareResult), 'the ceiling', null),
      ratioGoal('do-nothing route behind every plugin', rate(noopResult), '≥ 0.8× bare', noopResult.requestsPerSecond, bareResult.requestsPerSecond, { atLeast: 0.8 }),
      goal(
        'server CPU a request: bare, behind every plugin, ingest (ratio: bare ÷ plugins)',
        `${cpu.bare} µs, ${cpu.noop} µs, ${cpu.ingest} µs (medians; PostgreSQL's not included)`,
        'for the analysis',
        null,
        ratio(cpu.bare, cpu.noop),
      ),
      ratioGoal('POST /api/analytics, group commit (country + campaign on)', rate(appResult, 'events/s'), '≥ 0.5× bare', appResult.requestsPerSecond, bareResult.requestsPerSecond, { atLeast: 0.5 }),
      goal('POST /api/analytics, one INSERT per request', rate(perRequestResult, 'events/s'), 'baseline', null),
      ratioGoal('group commit ÷ one INSERT per request', `${appResult.requestsPerSecond} ÷ ${perRequestResult.requestsPerSecond}`, '≥ 3×', appResult.requestsPerSecond, perRequestResult.requestsPerSecond, { atLeast: 3 }),
      goal('acknowledged = committed (every round)', `${acknowledged.length} = ${stored}; one INSERT per request: ${perRequestAcknowledged.length} = ${perRequestStored}`, 'equal', ingest.acknowledgedEqualsCommitted),
      ...writePaths.map((w) => goal(`write path alone, ${w.batchSize} events/batch`, `${w.eventsPerSecond.toLocaleString('en')} events/s, ${w.msPerBatch} ms/batch`, 'for scale', null)),
      ...queries.flatMap((q) => [
        goal(`summary, ${q.events.toLocaleString('en')} events`, `p50 ${q.summaryHttp.p50Ms} ms, p95 ${q.summaryHttp.p95Ms} ms (raw scan ${q.rawScanForComparisonMs} ms)`, 'from rollups', null),
        goal(`daily series, ${q.events.toLocaleString('en')} events`, `p50 ${q.dailySeriesHttp.p50Ms} ms, p95 ${q.dailySeriesHttp.p95Ms} ms`, 'from rollups', null),
        goal(`daily series as CSV, ${q.events.toLocaleString('en')} events`, `p50 ${q.dailySeriesCsvHttp.p50Ms} ms, p95 ${q.dailySeriesCsvHttp.p95Ms} ms`, 'streamed', null),
        goal(`live visitors, ${q.events.toLocaleString('en')} events`, `p50 ${q.realtimeHttp.p50Ms} ms, p95 ${q.realtimeHttp.p95Ms} ms`, 'last 5 minutes', null),
      ]),
      goal('GET /script.js (the tracker)', `p50 ${trackerScriptHttp.p50Ms} ms, p95 ${trackerScriptHttp.p95Ms} ms`, 'cacheable', null),
    ]);
    console.log('\nWritten to bench/results/analytics.json');
    if (!ingest.acknowledgedEqualsCommitted) process.exitCode = 1;
  } finally {
    for (const child of children) await stopServer(child);
    await sql.end();
    await stack.stop();
  }
}

await main();
