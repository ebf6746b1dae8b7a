import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { createInterface } from 'node:readline';
import type autocannon from 'autocannon';
import postgres from 'postgres';
import type { MailSink } from '../scripts/stack/mail-sink.ts';
import { startStack, uniqueDatabaseName } from '../scripts/stack/index.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { generateApiKey } from '../src/lib/api-keys.ts';
import { benchArgs, compiledServer, goal, keepsTo, machine, type Measured, measure, otherBenchmarks, printGoals, ratio, ratioGoal, rssMiB, serverCpuPerRequest, settingOverrides, slopePerMinute, stopServer } from './load.ts';
import { serviceNodeFlags } from '../scripts/service-flags.ts';
import { type FixedRateOptions, measureAtFixedRate } from './fixed-rate.ts';

// npm run bench:read [-- --duration=10 --connections=10 --rate=1000 --rate-rounds=3 --soak=60 --soak-rate=400 --feedback=1000 --backlog=3000 --set=NAME=value,…]
//
// 1. Read: the feedback list (the service method behind GET
//    /api/feedback/get-feedback, 20 of N rows, with its count) as an admin's
//    claims under row-level security, the same as service_role (no RLS), a
//    bare route returning a constant, and the real route with the legacy
//    admin token: req/s, p50, p99 at a fixed number of connections (two
//    rounds in opposite order, averaged), then each at a fixed 1k req/s,
//    evenly spaced (bench/fixed-rate.ts; three rounds, the median p99 taken),
//    after a full collection and with the collections during it counted (and the
//    p99 of the time from the server's thread taking a request up to its
//    answer: the rest of a latency is the wait for the thread), and
//    in autocannon's rate mode (the second's requests in a burst at its start)
//    for comparison with earlier runs.
// 2. Soak: public feedback submission (limits raised, notifications sent to
//    the stack's SMTP sink), analytics ingestion, the admin list and /health
//    at a fixed rate, evenly spaced: errors, p99, the server's RSS before, during, after;
//    every acknowledged write must be in its table.
// 3. Drain: 3,000 notifications due at once; how fast they reach the SMTP
//    sink, and how long a new submission's notification waits behind them.
// Starts its own stack (fresh database, dropped at the end) and a server
// process (bench/read-server.ts) apart from the load generator.

const ROOT = path.resolve(import.meta.dirname, '..');
const args = benchArgs();
const DURATION_S = Number(args.duration ?? 10);
const WARMUP_S = 3;
const CONNECTIONS = Number(args.connections ?? 10);
const FIXED_RATE = Number(args.rate ?? 1000);
const FIXED_RATE_ROUNDS = Number(args['rate-rounds'] ?? 3);
const SOAK_S = Number(args.soak ?? 60);
const SOAK_RATE = Number(args['soak-rate'] ?? 400);
const FEEDBACK_ROWS = Number(args.feedback ?? 1000);
const DRAIN_BACKLOG = Number(args.backlog ?? 3000);
/** --set=NAME=value,NAME=value: settings of the app under test, to try a tuning in the same harness. */
const OVERRIDES = settingOverrides(args);
const BROWSER = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';

const log = (line: string) => console.log(`[bench:read] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitForQuietMachine() {
  for (let others = otherBenchmarks(); others.length > 0; others = otherBenchmarks()) {
    log(`another benchmark is running, waiting: ${others.join(' | ')}`);
    await sleep(10_000);
  }
}

async function startServer(settings: Record<string, string>, adminUserId: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [...serviceNodeFlags(), '--expose-gc', await compiledServer('bench/read-server.ts'), JSON.stringify(settings), adminUserId], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  for await (const line of createInterface({ input: child.stdout! })) {
    return { url: `http://127.0.0.1:${(JSON.parse(line) as { port: number }).port}`, child };
  }
  throw new Error('read server exited before listening');
}

/** An admin (auth.users row as the auth server writes it, plus the role), N feedback rows, a website. */
async function seed(sql: postgres.Sql) {
  const adminUserId = randomUUID();
  await sql.begin(async (tx) => {
    await tx`set local role supabase_auth_admin`;
    await tx`
      insert into auth.users (instance_id, id, aud, role, email, raw_user_meta_data, raw_app_meta_data, created_at, updated_at)
      values ('00000000-0000-0000-0000-000000000000', ${adminUserId}, 'authenticated', 'authenticated', 'bench-admin@example.test',
              ${sql.json({ name: 'Bench Admin' })}, ${sql.json({ provider: 'email' })}, now(), now())`;
  });
  await sql`insert into public.user_roles (user_id, role) values (${adminUserId}, 'admin')`;
  await sql`
    insert into public.feedback (name, email, comment, rating, category, created_at)
    select 'Reader ' || i, 'reader' || i || '@example.test', 'Seeded feedback number ' || i || ' for the read benchmark.',
           1 + i % 5, 'General Feedback', now() - make_interval(secs => i)
      from generate_series(1, ${FEEDBACK_ROWS}) as i`;
  // Their notifications are not what is measured.
  await sql`update public.feedback_outbox set sent_at = now() where sent_at is null`;
  const key = generateApiKey();
  const [website] = await sql`
    insert into public.websites (name, domain, api_key_hash, api_key_prefix)
    values ('Soak site', 'soak.example.test', ${key.hash}, ${key.prefix}) returning id`;
  return { adminUserId, websiteId: website.id as string };
}

function average(a: Measured, b: Measured): Measured {
  const mean = (x: number, y: number) => Math.round(((x + y) / 2) * 100) / 100;
  return {
    requestsPerSecond: Math.round((a.requestsPerSecond + b.requestsPerSecond) / 2),
    total: a.total + b.total,
    non2xx: a.non2xx + b.non2xx,
    errors: a.errors + b.errors,
    timeouts: a.timeouts + b.timeouts,
    statusCodes: Object.fromEntries([...new Set([...Object.keys(a.statusCodes), ...Object.keys(b.statusCodes)])].map((c) => [c, (a.statusCodes[c] ?? 0) + (b.statusCodes[c] ?? 0)])),
    p50Ms: mean(a.p50Ms, b.p50Ms),
    p90Ms: mean(a.p90Ms, b.p90Ms),
    p99Ms: mean(a.p99Ms, b.p99Ms),
    p999Ms: mean(a.p999Ms, b.p999Ms),
    maxMs: Math.max(a.maxMs, b.maxMs),
    autocannonP99Ms: mean(a.autocannonP99Ms ?? Number.NaN, b.autocannonP99Ms ?? Number.NaN),
  };
}

async function readPhase(url: string, adminToken: string, pid: number) {
  type Name = 'bare' | 'noRls' | 'rls' | 'realRoute';
  const routes: Record<Name, { path: string; headers?: Record<string, string> }> = {
    bare: { path: '/bench/constant' },
    noRls: { path: '/bench/feedback/no-rls' },
    rls: { path: '/bench/feedback/rls' },
    realRoute: { path: '/api/feedback/get-feedback?limit=20', headers: { authorization: `Bearer ${adminToken}` } },
  };
  const target = (name: Name): autocannon.Options => ({ url: `${url}${routes[name].path}`, headers: routes[name].headers });

  for (const name of Object.keys(routes) as Name[]) await measure({ ...target(name), connections: CONNECTIONS, duration: WARMUP_S });
  const rounds: Partial<Record<Name, Measured[]>> = {};
  // The server process's CPU (all threads) per request, each round; PostgreSQL's is not in it.
  const cpuRounds: Partial<Record<Name, number[]>> = {};
  for (const order of [['bare', 'noRls', 'rls', 'realRoute'], ['realRoute', 'rls', 'noRls', 'bare']] as Name[][]) {
    for (const name of order) {
      log(`${name}: ${DURATION_S}s at ${CONNECTIONS} connections`);
      const { result, cpuUsPerRequest } = await serverCpuPerRequest(pid, () => measure({ ...target(name), connections: CONNECTIONS, duration: DURATION_S }), (m) => m.total);
      (rounds[name] ??= []).push(result);
      (cpuRounds[name] ??= []).push(cpuUsPerRequest);
    }
  }
  const throughput = Object.fromEntries((Object.keys(routes) as Name[]).map((name) => [name, average(rounds[name]![0], rounds[name]![1])])) as Record<Name, Measured>;
  const serverCpuUsPerRequest = Object.fromEntries(
    (Object.keys(routes) as Name[]).map((name) => [name, Math.round(((cpuRounds[name]![0] + cpuRounds[name]![1]) / 2) * 10) / 10]),
  ) as Record<Name, number>;

  // Evenly spaced; each latency from when the request was issued, a wait for a busy connection included (bench/fixed-rate.ts).
  // In FIXED_RATE_ROUNDS rounds, the order turned each round, and each route's round with the
  // median p99 taken: a stall of the shared machine inside one window decided the ratio in two
  // runs on 2026-11-26 (docs/performance.md). Every round's p99 is kept in the results.
  const names = Object.keys(routes) as Name[];
  const fixedRateRounds: Partial<Record<Name, { measured: Measured; collections: Collections }[]>> = {};
  for (let round = 0; round < FIXED_RATE_ROUNDS; round += 1) {
    for (const name of [...names.slice(round % names.length), ...names.slice(0, round % names.length)]) {
      log(`round ${round + 1}/${FIXED_RATE_ROUNDS}: ${name}, ${DURATION_S}s at a fixed ${FIXED_RATE} req/s`);
      const before = await gcCounters(url, { collect: true });
      const measured = await measureAtFixedRate({ url, rate: FIXED_RATE, durationS: DURATION_S, connections: CONNECTIONS, request: () => routes[name] });
      (fixedRateRounds[name] ??= []).push({ measured, collections: collectionsBetween(before, await gcCounters(url), measured.total) });
    }
  }
  const fixedRate = {} as Record<Name, Measured>;
  const collections = {} as Record<Name, Collections>;
  const fixedRateRoundsP99Ms = {} as Record<Name, number[]>;
  for (const name of names) {
    const byP99 = [...fixedRateRounds[name]!].sort((a, b) => a.measured.p99Ms - b.measured.p99Ms);
    ({ measured: fixedRate[name], collections: collections[name] } = byP99[Math.floor((byP99.length - 1) / 2)]);
    fixedRateRoundsP99Ms[name] = fixedRateRounds[name]!.map((round) => round.measured.p99Ms);
  }
  // The same rate in autocannon's rate mode, as the runs before 2026-11-23 (late
  // night) took it: each second starts with a saturated burst of FIXED_RATE requests.
  const burstEachSecond = {} as Record<Name, Measured>;
  for (const name of Object.keys(routes) as Name[]) {
    log(`${name}: ${DURATION_S}s in autocannon's rate mode, ${FIXED_RATE} requests at the start of each second`);
    burstEachSecond[name] = await measure({ ...target(name), connections: CONNECTIONS, overallRate: FIXED_RATE, duration: DURATION_S });
  }
  return { paths: Object.fromEntries(Object.entries(routes).map(([name, r]) => [name, r.path])), rounds, throughput, serverCpuUsPerRequest, fixedRate, fixedRateRoundsP99Ms, collections, burstEachSecond };
}

interface GcCounters {
  scavenges: number;
  markCompacts: number;
  oldSpaceUsedBytes: number;
  /** Since the last `?collect=1`: the thread's longest pause for a collection. */
  longestPauseMs: number;
  /** Since the last `?collect=1`: p99 of the time from the thread taking a request up to its answer (bench/read-server.ts). */
  servedP99Ms: number | null;
}

interface Collections {
  scavenges: number;
  markCompacts: number;
  /** What the old generation grew by, a request; only when no mark-compact ran (one empties it). */
  oldGrowthKiBPerRequest: number | null;
  longestPauseMs: number;
  servedP99Ms: number | null;
}

const gcCounters = async (url: string, { collect = false } = {}) => (await (await fetch(`${url}/bench/gc${collect ? '?collect=1' : ''}`)).json()) as GcCounters;

function collectionsBetween(before: GcCounters, after: GcCounters, requests: number): Collections {
  const markCompacts = after.markCompacts - before.markCompacts;
  return {
    scavenges: after.scavenges - before.scavenges,
    markCompacts,
    oldGrowthKiBPerRequest: markCompacts === 0 && requests > 0 ? Math.round(((after.oldSpaceUsedBytes - before.oldSpaceUsedBytes) / 1024 / requests) * 100) / 100 : null,
    longestPauseMs: after.longestPauseMs,
    servedP99Ms: after.servedP99Ms,
  };
}

const describeCollections = (c: Collections) =>
  `${c.scavenges} scavenges, ${c.markCompacts} mark-compacts${c.oldGrowthKiBPerRequest === null ? '' : `, old generation +${c.oldGrowthKiBPerRequest} KiB a request`}, longest pause ${c.longestPauseMs} ms; p99 from the thread taking a request up ${c.servedP99Ms} ms`;

async function soakPhase(url: string, adminToken: string, websiteId: string, pid: number) {
  const perRoute = Math.round(SOAK_RATE / 4);
  let submitted = 0;
  let ingested = 0;
  const acknowledgedEvents: string[] = [];
  const acknowledgedFeedback: string[] = [];
  const idOf = (body: string) => (JSON.parse(body) as { data: { id: string } }).data.id;
  const json = { 'content-type': 'application/json' };
  const runs: Record<'submitFeedback' | 'ingestEvent' | 'listFeedback' | 'health', Pick<FixedRateOptions, 'request' | 'onResponse'>> = {
    submitFeedback: {
      request: () => {
        submitted += 1;
        return { method: 'POST', path: '/api/feedback', headers: json, body: JSON.stringify({ name: 'Soak Tester', email: `soak-${submitted}@example.test`, comment: `Soak comment number ${submitted}, long enough.`, rating: 1 + (submitted % 5) }) };
      },
      onResponse: (status, body) => {
        if (status === 201) acknowledgedFeedback.push(idOf(body));
      },
    },
    ingestEvent: {
      request: () => {
        ingested += 1;
        return { method: 'POST', path: '/api/analytics', headers: json, body: JSON.stringify({ websiteId, eventType: 'page_view', page: `/p/${ingested % 40}`, userAgent: BROWSER, sessionId: `soak-${Math.floor(ingested / 6)}` }) };
      },
      onResponse: (status, body) => {
        if (status === 201) acknowledgedEvents.push(idOf(body));
      },
    },
    listFeedback: { request: () => ({ path: '/api/feedback/get-feedback?limit=20', headers: { authorization: `Bearer ${adminToken}` } }) },
    health: { request: () => ({ path: '/health' }) },
  };

  const rss = { startMiB: await rssMiB(pid), duringMiB: [] as number[] };
  const sampler = setInterval(() => void rssMiB(pid).then((value) => rss.duringMiB.push(value)), 1_000);
  log(`soak: ${SOAK_S}s, ${perRoute} req/s on each of ${Object.keys(runs).join(', ')}`);
  const results = Object.fromEntries(
    await Promise.all(
      Object.entries(runs).map(async ([name, options]) => [name, await measureAtFixedRate({ ...options, url, connections: 4, rate: perRoute, durationS: SOAK_S })] as const),
    ),
  ) as Record<keyof typeof runs, Measured>;
  clearInterval(sampler);
  const breakdown = (await (await fetch(`${url}/bench/memory`)).json()) as MemoryBreakdown;
  await sleep(5_000);
  const afterMiB = await rssMiB(pid);
  return { perRoute, results, rss: { ...rss, afterMiB, breakdownAtEnd: breakdown }, acknowledgedEvents, acknowledgedFeedback };
}

/**
 * The outbox under a backlog: DRAIN_BACKLOG notifications made due at once
 * (feedback rows inserted straight into the table, as a burst of submissions
 * would leave them), then one new submission over HTTP while they drain.
 * How fast the backlog reaches the SMTP sink, and how long the new one waits.
 */
async function drainPhase(sql: postgres.Sql, url: string, sink: MailSink) {
  const backlogMarker = `drain-${randomUUID()}`;
  const atSink = (marker: string) => sink.messages.filter((message) => message.text.includes(marker)).length;
  const started = performance.now();
  await sql`
    insert into public.feedback (name, email, comment, rating, category)
    select 'Backlog ' || i, 'backlog' || i || '@example.test', ${backlogMarker} || ' number ' || i, 1 + i % 5, 'General Feedback'
      from generate_series(1, ${DRAIN_BACKLOG}) as i`;
  const newMarker = `new-${randomUUID()}`;
  const submittedAt = performance.now();
  const response = await fetch(`${url}/api/feedback`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'New Reader', email: 'new-reader@example.test', comment: `A new submission behind the backlog: ${newMarker}`, rating: 5 }),
  });
  if (response.status !== 201) throw new Error(`drain: submission answered ${response.status}: ${await response.text()}`);
  let newDelayS: number | null = null;
  let drainedS: number | null = null;
  while (performance.now() - started < 180_000) {
    if (newDelayS === null && atSink(newMarker) > 0) newDelayS = (performance.now() - submittedAt) / 1000;
    if (drainedS === null && atSink(backlogMarker) >= DRAIN_BACKLOG) drainedS = (performance.now() - started) / 1000;
    if (newDelayS !== null && drainedS !== null) break;
    await sleep(20);
  }
  const round1 = (value: number | null) => (value === null ? null : Math.round(value * 10) / 10);
  return {
    backlog: DRAIN_BACKLOG,
    delivered: atSink(backlogMarker),
    drainSeconds: round1(drainedS),
    emailsPerSecond: drainedS === null ? null : Math.round(DRAIN_BACKLOG / drainedS),
    newNotificationDelaySeconds: round1(newDelayS),
  };
}

interface MemoryBreakdown {
  rssMiB: number;
  heapTotalMiB: number;
  heapUsedMiB: number;
  externalMiB: number;
  spaces: Record<string, { committedMiB: number; usedMiB: number }>;
}

function memoryBreakdown(m: MemoryBreakdown) {
  const young = m.spaces.new_space;
  const old = m.spaces.old_space;
  const rest = Math.round((m.rssMiB - m.heapTotalMiB - m.externalMiB) * 10) / 10;
  return `RSS ${m.rssMiB}: V8 heap ${m.heapTotalMiB} committed (young ${young?.committedMiB}, ${young?.usedMiB} used; old ${old?.committedMiB}, ${old?.usedMiB} used), buffers outside it ${m.externalMiB}, the rest (heap pages V8 emptied and keeps, the node binary, malloc, stacks) ${rest}`;
}

async function main() {
  await waitForQuietMachine();
  const stack = await startStack({ databaseName: uniqueDatabaseName('portfolio_bench_read'), keepDatabase: false, log });
  const sql = postgres(stack.databaseUrl, { max: 4, onnotice: () => {} });
  let server: { url: string; child: ChildProcess } | undefined;
  try {
    const [pg] = await sql`select current_setting('server_version') as version`;
    const { adminUserId, websiteId } = await seed(sql);
    const adminSecret = randomBytes(32).toString('hex');
    const settings = {
      NODE_ENV: 'development',
      LOG_LEVEL: 'silent',
      // The app logs in as `authenticator`, as in production (README, Least privilege).
      DATABASE_URL: asLoginRole(stack.databaseUrl),
      ADMIN_JWT_SECRET: adminSecret,
      ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
      RATE_LIMIT_GENERAL_PER_15MIN: '1000000000',
      RATE_LIMIT_INGEST_PER_15MIN: '1000000000',
      RATE_LIMIT_FEEDBACK_PER_15MIN: '1000000000',
      SMTP_URL: `smtp://127.0.0.1:${stack.mail.smtpPort}`,
      FEEDBACK_NOTIFY_EMAILS: 'ops@example.test',
      FEEDBACK_OUTBOX_WORKER: 'true',
      // The drain measures how fast the outbox sends, one e-mail a notification: the
      // hourly cap (a policy, 30 by default) would hold all but 30 and send digests.
      FEEDBACK_NOTIFICATIONS_PER_HOUR: '0',
      ...OVERRIDES,
    };
    server = await startServer(settings, adminUserId);
    const pid = server.child.pid!;
    const adminToken = await signLegacyAdminToken(adminSecret, 'bench-admin');
    const host = await machine(pg.version as string);

    const read = await readPhase(server.url, adminToken, pid);
    const { throughput: t, fixedRate: f, fixedRateRoundsP99Ms: fr, burstEachSecond: b, serverCpuUsPerRequest: c, collections: gc } = read;
    const roundsOf = (values: number[]) => `rounds ${values.join(', ')}`;
    const readReport = {
      date: new Date().toISOString(),
      machine: host,
      setup: { feedbackRows: FEEDBACK_ROWS, page: 'limit 20, offset 0, with count', connections: CONNECTIONS, pipelining: 1, durationSeconds: DURATION_S, rounds: 2, fixedRate: FIXED_RATE, fixedRateRounds: FIXED_RATE_ROUNDS, logLevel: 'silent' },
      ...read,
      ratios: {
        rlsVsNoRls: ratio(t.rls.requestsPerSecond, t.noRls.requestsPerSecond),
        realRouteVsConstant: ratio(t.realRoute.requestsPerSecond, t.bare.requestsPerSecond),
        realRouteP99VsConstantAtFixedRate: ratio(f.realRoute.p99Ms, f.bare.p99Ms),
        rlsP99VsConstantAtFixedRate: ratio(f.rls.p99Ms, f.bare.p99Ms),
        fixedRateVsRealRouteThroughput: ratio(FIXED_RATE, t.realRoute.requestsPerSecond),
      },
      goals: { rlsVsNoRls: '>= 0.85', realRouteVsConstant: '>= 0.3', realRouteP99VsConstantAtFixedRate: '<= 2' },
      // Judged before rounding: the ratios above are rounded to two decimals.
      met: {
        rlsVsNoRls: keepsTo(t.rls.requestsPerSecond, t.noRls.requestsPerSecond, { atLeast: 0.85 }),
        realRouteVsConstant: keepsTo(t.realRoute.requestsPerSecond, t.bare.requestsPerSecond, { atLeast: 0.3 }),
        realRouteP99VsConstantAtFixedRate: keepsTo(f.realRoute.p99Ms, f.bare.p99Ms, { atMost: 2 }),
      },
    };
    await mkdir(path.join(ROOT, 'bench/results'), { recursive: true });
    await writeFile(path.join(ROOT, 'bench/results/read.json'), `${JSON.stringify(readReport, null, 2)}\n`);

    const soak = await soakPhase(server.url, adminToken, websiteId, pid);
    const [stored] = await sql`
      select (select count(*)::int from public.feedback where id = any(${soak.acknowledgedFeedback}::uuid[])) as feedback,
             (select count(*)::int from public.analytics_events where id = any(${soak.acknowledgedEvents}::uuid[])) as events`;
    // Notifications owed when the soak ended (+5 s), then how long the outbox worker takes to send them (at most 3 min).
    const owed = async () => (await sql`select count(*)::int as n from public.feedback_outbox where sent_at is null and gave_up_at is null`)[0].n as number;
    const outbox = { owedAfterSoak: await owed(), sinkMessagesAfterSoak: stack.mail.messages.length, drainSeconds: null as number | null, owedAtGiveUp: 0 };
    const drainStarted = performance.now();
    for (;;) {
      const left = await owed();
      if (left === 0) {
        outbox.drainSeconds = Math.round((performance.now() - drainStarted) / 100) / 10;
        break;
      }
      if (performance.now() - drainStarted > 180_000) {
        outbox.owedAtGiveUp = left;
        break;
      }
      await sleep(500);
    }
    // Every soak submission stored (acknowledged or cut off in flight when the load stopped),
    // every notification sent, and what the sink received: each e-mail once means all three agree.
    const [reconciled] = await sql`
      select (select count(*)::int from public.feedback) - ${FEEDBACK_ROWS}::int as submissions_stored,
             (select count(*)::int from public.feedback_outbox where sent_at is not null) - ${FEEDBACK_ROWS}::int as notifications_sent`;
    const r = soak.results;
    const all = Object.values(r);
    const during = soak.rss.duringMiB;
    const soakReport = {
      date: new Date().toISOString(),
      machine: host,
      durationSeconds: SOAK_S,
      rateTotal: soak.perRoute * 4,
      ratePerRoute: soak.perRoute,
      routes: r,
      overall: {
        requests: all.reduce((n, m) => n + m.total, 0),
        errors: all.reduce((n, m) => n + m.errors + m.non2xx, 0),
        worstRouteP99Ms: Math.max(...all.map((m) => m.p99Ms)),
      },
      rss: {
        startMiB: soak.rss.startMiB,
        duringMinMiB: Math.min(...during),
        duringMaxMiB: Math.max(...during),
        first10sAvgMiB: Math.round((during.slice(0, 10).reduce((a, b) => a + b, 0) / Math.min(10, during.length)) * 10) / 10,
        last10sAvgMiB: Math.round((during.slice(-10).reduce((a, b) => a + b, 0) / Math.min(10, during.length)) * 10) / 10,
        slopeMiBPerMinute: slopePerMinute(during, 1),
        afterMiB: soak.rss.afterMiB,
        breakdownAtEnd: soak.rss.breakdownAtEnd,
        samplesEverySecond: during,
      },
      acknowledged: { feedback: soak.acknowledgedFeedback.length, events: soak.acknowledgedEvents.length },
      stored: { feedback: stored.feedback, events: stored.events },
      outbox: { ...outbox, emailsPerSecondWhileDraining: outbox.drainSeconds ? Math.round(outbox.owedAfterSoak / outbox.drainSeconds) : null, sinkMessagesAtEnd: stack.mail.messages.length, submissionsStored: reconciled.submissions_stored, notificationsSent: reconciled.notifications_sent },
    };
    log(`drain: ${DRAIN_BACKLOG} notifications due at once, then one new submission`);
    const drain = await drainPhase(sql, server.url, stack.mail);
    await writeFile(path.join(ROOT, 'bench/results/soak.json'), `${JSON.stringify({ ...soakReport, drain }, null, 2)}\n`);

    console.log(`\nMachine: nproc ${host.nproc}, ${host.cpuModel}, ${host.memoryGiB} GiB, Node ${host.node}, PostgreSQL ${host.postgres}`);
    const rate = (m: Measured) => `${m.requestsPerSecond.toLocaleString('en')} req/s, p50 ${m.p50Ms} ms, p99 ${m.p99Ms} ms${m.errors + m.non2xx ? `, ${m.errors + m.non2xx} errors` : ''}`;
    const soakMax = soakReport.rss.duringMaxMiB;
    printGoals(`npm run bench:read: ${FEEDBACK_ROWS} feedback rows, a page of 20 with its count; ${CONNECTIONS} connections, ${DURATION_S} s x 2 rounds (mean); soak ${SOAK_S} s at ${soakReport.rateTotal} req/s`, [
      goal('constant route behind every plugin', rate(t.bare), 'the ceiling', null),
      goal('feedback list, service_role (no RLS)', rate(t.noRls), 'baseline', null),
      ratioGoal('feedback list, admin claims (RLS)', rate(t.rls), '≥ 0.85× no RLS', t.rls.requestsPerSecond, t.noRls.requestsPerSecond, { atLeast: 0.85 }),
      ratioGoal('GET /api/feedback/get-feedback', rate(t.realRoute), '≥ 0.3× constant route', t.realRoute.requestsPerSecond, t.bare.requestsPerSecond, { atLeast: 0.3 }),
      goal(
        'server CPU a request: constant route, no RLS, RLS, real route',
        `${c.bare} µs, ${c.noRls} µs, ${c.rls} µs, ${c.realRoute} µs (PostgreSQL's not included)`,
        'for the analysis',
        null,
      ),
      ratioGoal(
        `p99 at a fixed ${FIXED_RATE} req/s: real route ÷ constant route (median of ${FIXED_RATE_ROUNDS} rounds each)`,
        // On a slow machine the rate is most of what the real route can do, and its p99 is a queue's.
        `${f.realRoute.p99Ms} ms ÷ ${f.bare.p99Ms} ms (${roundsOf(fr.realRoute)}; ${roundsOf(fr.bare)}); the rate is ${Math.round((FIXED_RATE / t.realRoute.requestsPerSecond) * 100)} % of the real route's saturated throughput above`,
        '≤ 2×',
        f.realRoute.p99Ms,
        f.bare.p99Ms,
        { atMost: 2 },
      ),
      goal(
        `collections and time served in the ${DURATION_S} s at a fixed ${FIXED_RATE} req/s (the median round): real route; constant route`,
        `${describeCollections(gc.realRoute)}; ${describeCollections(gc.bare)}`,
        'for the analysis',
        null,
      ),
      ratioGoal(`p99 at a fixed ${FIXED_RATE} req/s: RLS list ÷ constant route`, `${f.rls.p99Ms} ms ÷ ${f.bare.p99Ms} ms (${roundsOf(fr.rls)})`, '≤ 2×', f.rls.p99Ms, f.bare.p99Ms, { atMost: 2 }),
      goal(
        `p99 with ${FIXED_RATE} requests at the start of each second (autocannon's rate mode): real route, constant route`,
        `${b.realRoute.p99Ms} ms, ${b.bare.p99Ms} ms`,
        'for comparison with earlier runs',
        null,
        ratio(b.realRoute.p99Ms, b.bare.p99Ms),
      ),
      goal('soak: requests, errors, worst route p99', `${soakReport.overall.requests.toLocaleString('en')}, ${soakReport.overall.errors}, ${soakReport.overall.worstRouteP99Ms} ms`, 'no errors', soakReport.overall.errors === 0),
      goal('soak: server RSS', `start ${soakReport.rss.startMiB}, max ${soakMax}, after ${soakReport.rss.afterMiB} MiB (slope ${soakReport.rss.slopeMiBPerMinute}/min)`, '≤ 200 MiB', soakMax <= 200),
      goal('soak: where the RSS is, at its end', memoryBreakdown(soakReport.rss.breakdownAtEnd), 'for the analysis', null),
      goal('soak: acknowledged = stored', `feedback ${soakReport.acknowledged.feedback} = ${stored.feedback}, events ${soakReport.acknowledged.events} = ${stored.events}`, 'equal', soakReport.acknowledged.feedback === stored.feedback && soakReport.acknowledged.events === stored.events),
      goal('soak: notifications owed 5 s after', `${outbox.owedAfterSoak}; stored ${reconciled.submissions_stored}, sent ${reconciled.notifications_sent}`, 'sent = stored', reconciled.submissions_stored === reconciled.notifications_sent),
      goal(`drain: ${DRAIN_BACKLOG} notifications due at once`, drain.drainSeconds === null ? `${drain.delivered} delivered in 180 s` : `${drain.drainSeconds} s, ${drain.emailsPerSecond} e-mails/s`, '≥ 200 e-mails/s', (drain.emailsPerSecond ?? 0) >= 200),
      goal('drain: a new notification behind the backlog', drain.newNotificationDelaySeconds === null ? 'not delivered in 180 s' : `${drain.newNotificationDelaySeconds} s`, '≤ 60 s', drain.newNotificationDelaySeconds !== null && drain.newNotificationDelaySeconds <= 60),
    ]);
    console.log('\nWritten to bench/results/read.json and bench/results/soak.json');
  } finally {
    if (server) await stopServer(server.child);
    await sql.end();
    await stack.stop();
  }
}

await main();
