import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { expect } from 'vitest';
import { freePort } from '../../scripts/stack/free-port.ts';
import { asLoginRole } from '../../src/lib/database-url.ts';
import { TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './app.ts';
import { feedbackBody } from './feedback-fixtures.ts';

// Requests for tests/faults.test.ts: the DB-backed routes it drives (public
// feedback submission, a write of one round trip, db.writeAtOnceAsActor;
// analytics ingestion; and two reads of one round trip each,
// db.readAtOnceAsActor: the admin feedback list and the analytics summary),
// sent over real HTTP with a deadline, so a request that hangs fails the
// test instead of holding it open; and the real server process to send them to.

export const REQUEST_DEADLINE_MS = 10_000;

const BROWSER = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36';

export interface Answer {
  route: RouteName;
  status: number;
  body: Record<string, unknown>;
  ms: number;
}

export type RouteName = 'submit feedback' | 'ingest event' | 'list feedback' | 'analytics summary';

export const SUCCESS: Record<RouteName, number> = { 'submit feedback': 201, 'ingest event': 201, 'list feedback': 200, 'analytics summary': 200 };

const PATHS: Record<RouteName, (target: Target) => string> = {
  'submit feedback': () => '/api/feedback',
  'ingest event': () => '/api/analytics',
  'list feedback': () => '/api/feedback/get-feedback?limit=5',
  'analytics summary': (target) => `/api/analytics?websiteId=${target.websiteId}`,
};

export interface Target {
  baseUrl: string;
  websiteId: string;
  adminAuthorization: string;
}

export async function send(target: Target, route: RouteName): Promise<Answer> {
  const started = performance.now();
  const init: RequestInit =
    route === 'submit feedback'
      ? { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(feedbackBody()) }
      : route === 'ingest event'
        ? {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ websiteId: target.websiteId, eventType: 'page_view', page: '/faults', userAgent: BROWSER, sessionId: randomUUID() }),
          }
        : { method: 'GET', headers: { authorization: target.adminAuthorization } };
  try {
    const response = await fetch(`${target.baseUrl}${PATHS[route](target)}`, { ...init, signal: AbortSignal.timeout(REQUEST_DEADLINE_MS) });
    const body = (await response.json()) as Record<string, unknown>;
    return { route, status: response.status, body, ms: Math.round(performance.now() - started) };
  } catch (error) {
    // No HTTP answer at all (deadline passed, connection reset, server gone): status 0.
    const { name, message, cause } = error as Error & { cause?: { code?: string; message?: string } };
    const reason = name === 'TimeoutError' ? `no answer within ${REQUEST_DEADLINE_MS} ms` : (cause?.code ?? cause?.message ?? message);
    return { route, status: 0, body: { transportError: reason }, ms: Math.round(performance.now() - started) };
  }
}

/**
 * The SPEC error envelope of a 503 (requestId: 5xx bodies carry it). Given
 * the server, a failure quotes what it logged for the request (a 500's error
 * and stack), so a rare failure says why the first time it is seen.
 */
export function expectUnavailable(answer: Answer, server?: ServerProcess): void {
  const requestId = typeof answer.body.requestId === 'string' ? answer.body.requestId : undefined;
  const logged = server && requestId ? server.output().split('\n').filter((line) => line.includes(requestId)) : [];
  expect(answer.status, [`${answer.route}: ${JSON.stringify(answer.body)}`, ...logged].join('\n')).toBe(503);
  expect(answer.body).toEqual({ success: false, error: expect.any(String), statusCode: 503, requestId: expect.any(String) });
}

/** The route's success, or 503 in the envelope; never 500, never anything else. */
export function expectSuccessOrUnavailable(answer: Answer, server?: ServerProcess): void {
  if (answer.status === SUCCESS[answer.route]) expect(answer.body.success, answer.route).toBe(true);
  else expectUnavailable(answer, server);
}

/** Ids the service acknowledged (201), to look for in the tables afterwards. */
export function acknowledgedId(answer: Answer): string | undefined {
  if (answer.status !== 201) return undefined;
  return (answer.body.data as { id: string }).id;
}

export interface ServerProcess {
  baseUrl: string;
  child: ChildProcess;
  /** What the process printed (LOG_LEVEL=error: failed requests, and a crash's stack). */
  output(): string;
  /** Null while it runs; else how it ended. */
  ended(): string | null;
  /** SIGTERM, then the exit code (null when a signal ended it) and how long the process took to exit. */
  terminate(): Promise<{ exitCode: number | null; tookMs: number }>;
  stop(): Promise<void>;
}

/**
 * `node src/server.ts` (or the `server` script given, e.g. a compiled one) against
 * `databaseUrl`, the way production runs it; resolves once /health answers 200.
 */
export async function startServerProcess(
  databaseUrl: string,
  extraEnv: Record<string, string> = {},
  server = path.resolve(import.meta.dirname, '../../src/server.ts'),
): Promise<ServerProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, [server], {
    env: {
      PATH: process.env.PATH ?? '',
      // Passed on so a patched driver can be tried (e.g. NODE_OPTIONS=--import=<resolve hook>).
      ...(process.env.NODE_OPTIONS ? { NODE_OPTIONS: process.env.NODE_OPTIONS } : {}),
      NODE_ENV: 'test',
      LOG_LEVEL: 'error',
      HOST: '127.0.0.1',
      PORT: String(port),
      // The API's login role; the stack migrated as the owner.
      DATABASE_URL: asLoginRole(databaseUrl),
      SUPABASE_JWT_SECRET: TEST_JWT_SECRET,
      ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
      RATE_LIMIT_FEEDBACK_PER_15MIN: '1000000',
      RATE_LIMIT_GENERAL_PER_15MIN: '1000000',
      RATE_LIMIT_ACCOUNT_PER_MIN: '1000000',
      RATE_LIMIT_INGEST_PER_15MIN: '1000000',
      ...extraEnv,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  let ended: string | null = null;
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<void>((resolve) =>
    child.once('exit', (code, signal) => {
      ended = `exited with ${signal ?? `code ${code}`}`;
      resolve();
    }),
  );
  const baseUrl = `http://127.0.0.1:${port}`;
  for (const deadline = Date.now() + 15_000; ; ) {
    if (ended) throw new Error(`server ${ended} before listening:\n${output}`);
    const ok = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(1_000) }).then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > deadline) throw new Error(`server did not answer /health within 15 s:\n${output}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    baseUrl,
    child,
    output: () => output,
    ended: () => ended,
    async terminate() {
      const signalled = performance.now();
      child.kill('SIGTERM');
      await exited;
      return { exitCode: child.exitCode, tookMs: performance.now() - signalled };
    },
    async stop() {
      if (ended) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Fails with the process's own words when it is no longer running. */
export function expectRunning(server: ServerProcess): void {
  const ended = server.ended();
  const lastLines = server.output().trim().split('\n').slice(-15).join('\n');
  expect(ended, `the server process ${ended}; its last output:\n${lastLines}`).toBeNull();
}
