import { spawn } from 'node:child_process';
import path from 'node:path';

// `node src/server.ts` with nothing but PATH and `env`, for the tests of how
// the process starts and stops (configuration errors, the login check, signals).

const SERVER = path.resolve(import.meta.dirname, '../../src/server.ts');

export interface SpawnedServer {
  child: ReturnType<typeof spawn>;
  /** Settles with the exit code. */
  exited: Promise<number | null>;
  /** Everything written to stdout and stderr so far. */
  output(): string;
}

export function startServer(env: Record<string, string>): SpawnedServer {
  const child = spawn(process.execPath, [SERVER], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}

/** The exit code, or 'running' when the process is still up after `ms` (then it is stopped). */
export async function exitWithin(server: SpawnedServer, ms: number): Promise<number | null | 'running'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'running'>((resolve) => (timer = setTimeout(() => resolve('running'), ms)));
  const outcome = await Promise.race([server.exited, late]);
  clearTimeout(timer);
  if (outcome === 'running') {
    server.child.kill('SIGKILL');
    await server.exited;
  }
  return outcome;
}

/** Waits until the server answers GET /health with 2xx and returns that answer; throws with its output if it does not within `ms`. */
export async function untilHealthy(server: SpawnedServer, base: string, ms = 15_000): Promise<Response> {
  const deadline = Date.now() + ms;
  for (;;) {
    const response = await fetch(`${base}/health`).catch(() => undefined);
    if (response?.ok) return response;
    if (Date.now() > deadline) throw new Error(`server did not answer /health within ${ms} ms:\n${server.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
