import { type ChildProcess, execFileSync } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import autocannon from 'autocannon';
import { build } from '../scripts/build.ts';

// Load generation, measurement and reporting for the benchmarks. autocannon
// drives the requests; latencies come from its per-response event (float
// milliseconds from hrtime), because its own histogram keeps whole
// milliseconds, too coarse for a 5 ms target. autocannon's p99 is kept beside
// ours: under a fixed rate it adds coordinated-omission samples, ours are the
// raw times.

const ROOT = path.resolve(import.meta.dirname, '..');
/** Where the benchmarks' servers are compiled (.cache/bench-build/<entry, slashes as dashes>/, the repo's layout inside). */
export const BENCH_BUILD = path.join(ROOT, '.cache/bench-build');
/** Once per entry and run: servers started together share one build. */
const compiledServers = new Map<string, Promise<string>>();

export interface Measured {
  requestsPerSecond: number;
  total: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  statusCodes: Record<string, number>;
  p50Ms: number;
  p90Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  /** autocannon's own p99 (whole ms), when autocannon made the load. */
  autocannonP99Ms?: number;
  /** Under a fixed rate (bench/fixed-rate.ts): how late this process issued its requests, p99. */
  issuedLateP99Ms?: number;
}

const round2 = (value: number) => Math.round(value * 100) / 100;

/** a ÷ b to two decimals: how the benchmarks state a goal's ratio. */
export const ratio = (a: number, b: number) => round2(a / b);

/**
 * The command line's `--name=value` options, split at the first '=' (so
 * `--set=NAME=value` keeps its value); `--name` alone maps to ''.
 */
export function benchArgs(argv = process.argv.slice(2)): Record<string, string> {
  return Object.fromEntries(
    argv.map((arg) => {
      const option = arg.replace(/^--/, '');
      const split = option.indexOf('=');
      return split === -1 ? [option, ''] : [option.slice(0, split), option.slice(split + 1)];
    }),
  );
}

/** `--set=NAME=value,NAME=value`: settings of the app under test, each split at its first '='. */
export function settingOverrides(args: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    (args.set ?? '')
      .split(',')
      .filter(Boolean)
      .map((pair) => {
        const split = pair.indexOf('=');
        if (split < 1) throw new Error(`--set: ${pair} is not NAME=value`);
        return [pair.slice(0, split), pair.slice(split + 1)];
      }),
  );
}

/** Stops a benchmark's server process and waits until it has exited. */
export async function stopServer(child: ChildProcess) {
  if (child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  await exited;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

/** The latency figures of Measured, from latencies in ms sorted ascending. */
export function latencyFigures(sorted: number[]): Pick<Measured, 'p50Ms' | 'p90Ms' | 'p99Ms' | 'p999Ms' | 'maxMs'> {
  return {
    p50Ms: round2(percentile(sorted, 50)),
    p90Ms: round2(percentile(sorted, 90)),
    p99Ms: round2(percentile(sorted, 99)),
    p999Ms: round2(percentile(sorted, 99.9)),
    maxMs: round2(sorted.at(-1) ?? Number.NaN),
  };
}

export async function measure(options: autocannon.Options): Promise<Measured> {
  const samples: number[] = [];
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon({ pipelining: 1, ...options }, (error, done) => (error ? reject(error) : resolve(done)));
    instance.on('response', (_client, statusCode, _bytes, ms) => {
      if (statusCode >= 200 && statusCode < 300) samples.push(ms);
    });
  });
  samples.sort((a, b) => a - b);
  const statusCodes = Object.fromEntries(Object.entries(result.statusCodeStats ?? {}).map(([code, { count }]) => [code, count ?? 0]));
  return {
    requestsPerSecond: Math.round(result.requests.total / result.duration),
    total: result.requests.total,
    non2xx: result.non2xx,
    errors: result.errors,
    timeouts: result.timeouts,
    statusCodes,
    ...latencyFigures(samples),
    autocannonP99Ms: result.latency.p99,
  };
}

/** Resident set size of a process, in MiB (Linux /proc). */
export async function rssMiB(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  const kib = Number(/^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1] ?? Number.NaN);
  return round2(kib / 1024);
}

const CLOCK_TICKS_PER_SECOND = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;

/** CPU time a process has used so far, user and system, all of its threads, in seconds (Linux /proc). */
export async function cpuSeconds(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  // Fields after the parenthesised command name; utime and stime are the 14th and 15th of the line.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS_PER_SECOND;
}

/**
 * Runs `work` (a load of `requests()` requests) and returns the server's CPU
 * microseconds per request over it. On a shared machine it moves less than
 * throughput, which also counts every other process's turn on the cores; it
 * still falls as a server gets busier and one wake-up serves more requests.
 */
export async function serverCpuPerRequest<T>(pid: number, work: () => Promise<T>, requests: (result: T) => number) {
  const before = await cpuSeconds(pid);
  const result = await work();
  const used = (await cpuSeconds(pid)) - before;
  return { result, cpuUsPerRequest: round2((used * 1e6) / Math.max(1, requests(result))) };
}

/** Least-squares slope of `values` sampled every `intervalS` seconds, per minute. */
export function slopePerMinute(values: number[], intervalS: number): number {
  const n = values.length;
  if (n < 2) return 0;
  const xs = values.map((_, i) => i * intervalS);
  const meanX = xs.reduce((a, b) => a + b, 0) / n;
  const meanY = values.reduce((a, b) => a + b, 0) / n;
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i += 1) {
    num += (xs[i] - meanX) * (values[i] - meanY);
    den += (xs[i] - meanX) ** 2;
  }
  return round2((num / den) * 60);
}

export async function machine(postgresVersion: string) {
  const cpuinfo = await readFile('/proc/cpuinfo', 'utf8').catch(() => '');
  return {
    nproc: Number(execFileSync('nproc', { encoding: 'utf8' }).trim()),
    cpuModel: /^model name\s*:\s*(.+)$/m.exec(cpuinfo)?.[1] ?? os.cpus()[0]?.model ?? 'unknown',
    memoryGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    postgres: postgresVersion,
    platform: `${os.platform()} ${os.release()}`,
    note: 'load generator, server and PostgreSQL share the same cores; PostgreSQL default settings',
  };
}

/** Other benchmark processes on this machine (their figures and ours would be noise). */
export function otherBenchmarks(): string[] {
  const own = new Set([process.pid, process.ppid]);
  return execFileSync('ps', ['-eo', 'pid=,args='], { encoding: 'utf8' })
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => /\bbench\//.test(line) && !own.has(Number(line.split(/\s+/)[0])));
}

/** One line of a benchmark's report: a figure, what it is compared with, and the goal. */
export interface GoalRow {
  figure: string;
  value: string;
  /** The ratio the goal is about, when there is one. */
  ratio?: number;
  goal: string;
  met: boolean | null;
}

export function goal(figure: string, value: string, goalText: string, met: boolean | null, ratio?: number): GoalRow {
  return { figure, value, ratio, goal: goalText, met };
}

/** A bound on a ratio: at least or at most this much. */
export type RatioBound = { atLeast: number } | { atMost: number };

/** Whether a ÷ b keeps to `bound`, judged before rounding: 0.797 does not meet ≥ 0.8. */
export function keepsTo(a: number, b: number, bound: RatioBound): boolean {
  return 'atLeast' in bound ? a / b >= bound.atLeast : a / b <= bound.atMost;
}

/**
 * A goal on a ÷ b: met or not judged before rounding (keepsTo), and the ratio
 * shown to two decimals, or to three where two would show the bound itself
 * beside a NO.
 */
export function ratioGoal(figure: string, value: string, goalText: string, a: number, b: number, bound: RatioBound): GoalRow {
  const met = keepsTo(a, b, bound);
  const shown = ratio(a, b);
  const limit = 'atLeast' in bound ? bound.atLeast : bound.atMost;
  return goal(figure, value, goalText, met, !met && shown === limit ? Math.round((a / b) * 1000) / 1000 : shown);
}

/** The one table a benchmark prints: every figure, its ratio and its goal. */
export function printGoals(title: string, rows: GoalRow[]) {
  console.log(`\n${title}`);
  console.table(
    rows.map((row) => ({
      figure: row.figure,
      measured: row.value,
      ratio: row.ratio ?? '',
      goal: row.goal,
      met: row.met === null ? '' : row.met ? 'yes' : 'NO',
    })),
  );
}

/**
 * A benchmark's server process (`entry`, a .ts path from the repo root)
 * compiled as `npm run build` compiles the service, so the benchmarks measure
 * what `npm start` runs, not the sources through Node's type stripping.
 * Returns the path of the .js to start.
 */
export function compiledServer(entry: string): Promise<string> {
  const source = entry.replace(/\.ts$/, '');
  let compiled = compiledServers.get(entry);
  if (!compiled) {
    // bench/server.ts and src/server.ts must not share a folder: a build empties its folder first.
    const outDir = path.join(BENCH_BUILD, source.replaceAll('/', '-'));
    compiled = build(outDir, [entry]).then(() => path.join(outDir, `${source}.js`));
    compiledServers.set(entry, compiled);
  }
  return compiled;
}
