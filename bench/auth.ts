import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import postgres from 'postgres';
import { findAuthBinary } from '../scripts/stack/auth-server.ts';
import { freePort } from '../scripts/stack/free-port.ts';
import { startStack, uniqueDatabaseName } from '../scripts/stack/index.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { benchArgs, compiledServer, keepsTo, machine, otherBenchmarks, percentile } from './load.ts';
import { serviceNodeFlags } from '../scripts/service-flags.ts';

// npm run bench:auth [-- --duration=10 --clients=10 --accounts=40]
//
// Sign-in and refresh through our routes (POST /api/auth/signin, /refresh)
// against the same calls made straight to the auth server (its /token
// grants, through the stack's gateway), each with `clients` closed-loop
// clients for `duration` seconds after a 2 s warm-up, in two rounds of
// opposite order (averaged). A refresh token works once, so every client
// carries its own chain. Needs a Supabase Auth binary (SUPABASE_AUTH_BIN or
// gotrue on the PATH); its per-IP limits are raised, since every request
// here comes from one address.

const ROOT = path.resolve(import.meta.dirname, '..');
const args = benchArgs();
const DURATION_S = Number(args.duration ?? 10);
const CLIENTS = Number(args.clients ?? 10);
const ACCOUNTS = Number(args.accounts ?? 40);
const WARMUP_S = 2;
const GOAL = 0.8;

const log = (line: string) => console.log(`[bench:auth] ${line}`);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Phase {
  requestsPerSecond: number;
  total: number;
  failures: number;
  p50Ms: number;
  p99Ms: number;
}

/** `clients` loops each calling `step` until the time is up; latencies of successful calls after the warm-up. */
async function closedLoop(clients: number, step: (client: number) => Promise<boolean>): Promise<Phase> {
  const samples: number[] = [];
  let failures = 0;
  const warmEnd = performance.now() + WARMUP_S * 1000;
  const end = warmEnd + DURATION_S * 1000;
  await Promise.all(
    Array.from({ length: clients }, async (_, client) => {
      while (performance.now() < end) {
        const started = performance.now();
        const ok = await step(client).catch(() => false);
        if (started < warmEnd) continue;
        if (ok) samples.push(performance.now() - started);
        else failures += 1;
      }
    }),
  );
  samples.sort((a, b) => a - b);
  const round2 = (value: number) => Math.round(value * 100) / 100;
  return {
    requestsPerSecond: round2(samples.length / DURATION_S),
    total: samples.length,
    failures,
    p50Ms: round2(percentile(samples, 50)),
    p99Ms: round2(percentile(samples, 99)),
  };
}

const average = (a: Phase, b: Phase): Phase => ({
  requestsPerSecond: Math.round(((a.requestsPerSecond + b.requestsPerSecond) / 2) * 100) / 100,
  total: a.total + b.total,
  failures: a.failures + b.failures,
  p50Ms: Math.round(((a.p50Ms + b.p50Ms) / 2) * 100) / 100,
  p99Ms: Math.round(((a.p99Ms + b.p99Ms) / 2) * 100) / 100,
});

async function startApi(env: Record<string, string>): Promise<{ url: string; child: ChildProcess }> {
  const port = await freePort();
  const child = spawn(process.execPath, [...serviceNodeFlags(), await compiledServer('src/server.ts')], {
    env: { PATH: process.env.PATH ?? '', HOST: '127.0.0.1', PORT: String(port), ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 15_000; Date.now() < deadline; await sleep(100)) {
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) return { url, child };
  }
  child.kill('SIGKILL');
  throw new Error('the API did not start');
}

const jsonPost = (body: unknown, headers: Record<string, string> = {}): RequestInit => ({
  method: 'POST',
  headers: { 'content-type': 'application/json', ...headers },
  body: JSON.stringify(body),
});

async function main() {
  const binary = findAuthBinary();
  if (!binary) {
    console.error('bench:auth needs a Supabase Auth binary: set SUPABASE_AUTH_BIN or put gotrue on the PATH (README).');
    process.exit(2);
  }
  for (let others = otherBenchmarks(); others.length > 0; others = otherBenchmarks()) {
    log(`another benchmark is running, waiting: ${others.join(' | ')}`);
    await sleep(10_000);
  }
  const jwtSecret = randomBytes(32).toString('hex');
  const stack = await startStack({
    databaseName: uniqueDatabaseName('portfolio_bench_auth'),
    keepDatabase: false,
    auth: {
      binary,
      jwtSecret,
      adjust: (settings) => ({ ...settings, rateLimits: { emailSent: 1e6, signInSignUps: 1e6, tokenVerifications: 1e6, tokenRefresh: 1e6 } }),
    },
    log,
  });
  const sql = postgres(stack.databaseUrl, { max: 1, onnotice: () => {} });
  let api: { url: string; child: ChildProcess } | undefined;
  try {
    const auth = stack.auth!;
    const [pg] = await sql`select current_setting('server_version') as version`;
    api = await startApi({
      NODE_ENV: 'production',
      LOG_LEVEL: 'silent',
      // The app logs in as `authenticator`, as in production (README, Least privilege).
      DATABASE_URL: asLoginRole(stack.databaseUrl),
      SUPABASE_URL: auth.url,
      SUPABASE_ANON_KEY: auth.anonKey,
      SUPABASE_SERVICE_ROLE_KEY: auth.serviceRoleKey,
      SUPABASE_JWT_SECRET: jwtSecret,
      ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
      RATE_LIMIT_AUTH_PER_MIN: '1000000000',
      RATE_LIMIT_ACCOUNT_PER_MIN: '1000000000',
      RATE_LIMIT_GENERAL_PER_15MIN: '1000000000',
      FEEDBACK_OUTBOX_WORKER: 'false',
      // Production refuses to start without these unless they are turned off by name.
      CAPTCHA_PROVIDER: 'off',
      LEGACY_ADMIN_TOKEN: 'off',
    });

    const password = 'bench-secret-1';
    const emails = Array.from({ length: ACCOUNTS }, (_, i) => `bench-${i}-${randomBytes(3).toString('hex')}@example.com`);
    for (const email of emails) {
      const created = await fetch(
        `${auth.url}/auth/v1/admin/users`,
        jsonPost({ email, password, email_confirm: true, user_metadata: { name: 'Bench User' } }, { apikey: auth.serviceRoleKey, authorization: `Bearer ${auth.serviceRoleKey}` }),
      );
      if (!created.ok) throw new Error(`creating ${email}: ${created.status} ${await created.text()}`);
    }
    log(`${ACCOUNTS} accounts; ${CLIENTS} clients, ${DURATION_S} s per phase after ${WARMUP_S} s of warm-up`);

    const direct = (grant: string, body: unknown) =>
      fetch(`${auth.url}/auth/v1/token?grant_type=${grant}`, jsonPost(body, { apikey: auth.anonKey }));
    const ours = (route: string, body: unknown) => fetch(`${api!.url}/api/auth/${route}`, jsonPost(body));
    const emailOf = (client: number, round: number) => emails[(client * 7 + round) % emails.length];

    let calls = 0;
    const signIn = {
      direct: (client: number) => direct('password', { email: emailOf(client, calls++), password }).then(async (r) => r.ok && Boolean(((await r.json()) as { access_token?: string }).access_token)),
      ours: (client: number) => ours('signin', { email: emailOf(client, calls++), password }).then(async (r) => r.ok && Boolean(((await r.json()) as { data?: unknown }).data)),
    };

    /** One refresh-token chain per client, each started by a sign-in. */
    async function chains(): Promise<string[]> {
      return Promise.all(
        Array.from({ length: CLIENTS }, async (_, client) => {
          const answer = (await (await direct('password', { email: emailOf(client, 0), password })).json()) as { refresh_token: string };
          return answer.refresh_token;
        }),
      );
    }
    const refreshDirect = (tokens: string[]) => async (client: number) => {
      const response = await direct('refresh_token', { refresh_token: tokens[client] });
      if (!response.ok) return false;
      tokens[client] = ((await response.json()) as { refresh_token: string }).refresh_token;
      return true;
    };
    const refreshOurs = (tokens: string[]) => async (client: number) => {
      const response = await ours('refresh', { refreshToken: tokens[client] });
      if (!response.ok) return false;
      tokens[client] = ((await response.json()) as { data: { session: { refreshToken: string } } }).data.session.refreshToken;
      return true;
    };

    const run = async (label: string, step: (client: number) => Promise<boolean>) => {
      const phase = await closedLoop(CLIENTS, step);
      log(`${label}: ${phase.requestsPerSecond} req/s, p50 ${phase.p50Ms} ms, p99 ${phase.p99Ms} ms, ${phase.failures} failed`);
      return phase;
    };
    const signInDirect1 = await run('sign-in, straight to the auth server', signIn.direct);
    const signInOurs1 = await run('sign-in, through POST /api/auth/signin', signIn.ours);
    const signInOurs2 = await run('sign-in, through POST /api/auth/signin', signIn.ours);
    const signInDirect2 = await run('sign-in, straight to the auth server', signIn.direct);
    const refreshDirect1 = await run('refresh, straight to the auth server', refreshDirect(await chains()));
    const refreshOurs1 = await run('refresh, through POST /api/auth/refresh', refreshOurs(await chains()));
    const refreshOurs2 = await run('refresh, through POST /api/auth/refresh', refreshOurs(await chains()));
    const refreshDirect2 = await run('refresh, straight to the auth server', refreshDirect(await chains()));

    const phases = {
      signIn: { direct: average(signInDirect1, signInDirect2), ours: average(signInOurs1, signInOurs2) },
      refresh: { direct: average(refreshDirect1, refreshDirect2), ours: average(refreshOurs1, refreshOurs2) },
    };
    const ratios = Object.fromEntries(
      Object.entries(phases).map(([name, { direct: d, ours: o }]) => [
        name,
        {
          throughput: Math.round((o.requestsPerSecond / d.requestsPerSecond) * 100) / 100,
          p99: Math.round((d.p99Ms / o.p99Ms) * 100) / 100,
        },
      ]),
    );
    const report = {
      date: new Date().toISOString(),
      machine: await machine(pg.version as string),
      setup: { clients: CLIENTS, accounts: ACCOUNTS, durationSeconds: DURATION_S, warmupSeconds: WARMUP_S, rounds: 2, nodeEnv: 'production', logLevel: 'silent' },
      phases,
      ratios,
      goal: `ours ÷ direct ≥ ${GOAL} for throughput, direct p99 ÷ our p99 ≥ ${GOAL}`,
    };
    await mkdir(path.join(ROOT, 'bench/results'), { recursive: true });
    await writeFile(path.join(ROOT, 'bench/results/auth.json'), `${JSON.stringify(report, null, 2)}\n`);

    const rows = Object.entries(phases).map(([name, { direct: d, ours: o }]) => {
      const r = ratios[name];
      // Met or not is judged before rounding (keepsTo): 0.797 does not meet 0.8.
      const met = (shown: number, a: number, b: number) => `${shown} ${keepsTo(a, b, { atLeast: GOAL }) ? 'met' : 'NOT met'}`;
      return `| ${name === 'signIn' ? 'sign-in' : 'refresh'} | ${d.requestsPerSecond} / ${d.p99Ms} ms | ${o.requestsPerSecond} / ${o.p99Ms} ms | ${met(r.throughput, o.requestsPerSecond, d.requestsPerSecond)} | ${met(r.p99, d.p99Ms, o.p99Ms)} |`;
    });
    console.log(
      [
        '',
        `| route | straight to the auth server: req/s / p99 | through our route: req/s / p99 | throughput ours ÷ direct (goal ≥ ${GOAL}) | p99 direct ÷ ours (goal ≥ ${GOAL}) |`,
        '| --- | --- | --- | --- | --- |',
        ...rows,
        '',
        'bench/results/auth.json written',
      ].join('\n'),
    );
  } finally {
    api?.child.kill('SIGTERM');
    await sql.end();
    await stack.stop();
  }
}

await main();
