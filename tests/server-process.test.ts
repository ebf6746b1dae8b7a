import http from 'node:http';
import net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { parseConfig, parseSettings } from '../src/config.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/secrets.ts';
import { exitWithin, startServer, untilHealthy } from './support/spawned-server.ts';

// The process around the app: configuration errors stop the start with one
// line naming the variable, and so does a production login that is too strong
// or refused even when the database answers only after the start; SIGTERM lets
// requests in flight finish.

describe('configuration', () => {
  it('names every missing or invalid variable on one line', () => {
    expect(() => parseConfig({ PORT: 'eighty', CORS_ORIGIN: 'not a url' })).toThrowError(
      /^Invalid configuration: .*PORT is invalid.*CORS_ORIGIN is invalid.*DATABASE_URL is missing/,
    );
  });

  it('applies the documented defaults', () => {
    const config = parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://localhost/x' });
    expect(config).toMatchObject({
      PORT: 3000,
      CORS_ORIGIN: 'http://localhost:5173',
      RATE_LIMIT_AUTH_PER_MIN: 10,
      RATE_LIMIT_RESET_PER_MIN: 5,
      RATE_LIMIT_ACCOUNT_PER_MIN: 10,
      RATE_LIMIT_FEEDBACK_PER_15MIN: 5,
      RATE_LIMIT_GENERAL_PER_15MIN: 100,
    });
  });

  it('a variable set to nothing (a .env copied from .env.example) takes its default', () => {
    const config = parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://localhost/x', PORT: '', HOST: ' ', RATE_LIMIT_AUTH_PER_MIN: '', SMTP_URL: '' });
    expect(config).toMatchObject({ PORT: 3000, HOST: '127.0.0.1', RATE_LIMIT_AUTH_PER_MIN: 10 });
    expect(config.SMTP_URL).toBeUndefined();
    expect(parseSettings({ NODE_ENV: '' }, ['NODE_ENV']).NODE_ENV).toBe('production');
    expect(() => parseConfig({ NODE_ENV: 'development', DATABASE_URL: '' })).toThrowError(/^Invalid configuration: DATABASE_URL is missing$/);
  });

  it('a bad variable stops the process with that one line and exit code 1', async () => {
    const server = startServer({ PORT: '70000' });
    expect(await server.exited).toBe(1);
    expect(server.output().trim().split('\n')).toEqual([
      // Unset NODE_ENV is production: its missing secrets are named on the same line.
      expect.stringMatching(/^Invalid configuration: PORT is invalid .*; DATABASE_URL is missing; CAPTCHA_SECRET is missing /),
    ]);
  });
});

describe('a port that cannot be had', () => {
  it('taken: one log entry at error naming it and PORT, exit code 1, no stack trace', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as net.AddressInfo;
    try {
      const server = startServer({ NODE_ENV: 'development', DATABASE_URL: asLoginRole(inject('stack').databaseUrl), PORT: String(port) });
      expect(await exitWithin(server, 10_000)).toBe(1);
      // Once the log has begun, the refusal is one of its entries, so a log shipper keeps it.
      const lines = server.output().trim().split('\n');
      expect(lines.every((line) => line.startsWith('{'))).toBe(true);
      expect(JSON.parse(lines.at(-1)!)).toMatchObject({ level: 50, msg: `port ${port} on 127.0.0.1 is taken: stop what listens there, or set PORT` });
      expect(server.output()).not.toContain('    at ');
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });
});

/** A development server on this run's database, logging at info, once it answers /health. */
async function startHealthy(env: Record<string, string> = {}) {
  // A port the OS hands out as free: a random one in its ephemeral range can be
  // another connection's local port (it was once: EADDRINUSE, and the test waited in vain).
  const port = await freePort();
  const server = startServer({ NODE_ENV: 'development', DATABASE_URL: inject('stack').databaseUrl, PORT: String(port), LOG_LEVEL: 'info', ...env });
  const base = `http://127.0.0.1:${port}`;
  await untilHealthy(server, base);
  return { server, base };
}

describe('graceful shutdown', () => {
  it('SIGTERM finishes the request in flight, then exits 0', async () => {
    const { server, base } = await startHealthy();
    // A request whose body is still arriving when the signal comes is in flight.
    const { answered, finish } = requestInFlight(base);
    await new Promise((resolve) => setTimeout(resolve, 300));
    server.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 300));
    finish();
    const { status, body } = await answered;
    expect(status).toBe(400);
    expect(JSON.parse(body).error).toBe('Email and password are required');
    expect(await server.exited).toBe(0);
    // The log says what started (version, rules) and that the stop was clean, last.
    const lines = server.output().trim().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
    expect(lines.find((line) => line.msg === 'portfolio-backend started')).toMatchObject({ version: '0.1.0', nodeEnv: 'development', node: process.version });
    const messages = lines.map((line) => line.msg);
    expect(messages.at(-1)).toBe('shut down');
    expect(messages.indexOf('shutting down')).toBeGreaterThan(messages.indexOf('portfolio-backend started'));
    await expect(fetch(`${base}/health`)).rejects.toThrow();
  });
});

/** A sign-in whose body is still arriving: in flight until `finish` sends the rest; `answered` settles with the reply. */
function requestInFlight(base: string) {
  const request = http.request(`${base}/api/auth/signin`, { method: 'POST', headers: { 'content-type': 'application/json' } });
  const answered = new Promise<{ status: number; body: string }>((resolve, reject) => {
    request.on('response', (response) => {
      let body = '';
      response.on('data', (chunk) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
    });
    request.on('error', reject);
  });
  request.write('{"email": "someone@example.test"');
  return { answered, finish: () => request.end('}') };
}

describe('a shutdown signal delivered twice (npm passes it on to a child that has it already)', () => {
  // Ctrl-C on `npm start` reaches npm and the server (one process group), and
  // npm forwards its copy; so does a kill of the group (systemd). The copy
  // must not cut the stop short.
  for (const [first, second] of [['SIGTERM', 'SIGTERM'], ['SIGINT', 'SIGTERM']] as const) {
    it(`${first} then ${second} 20 ms later: the request in flight is answered, "shut down" logged, exit 0`, async () => {
      const { server, base } = await startHealthy();
      const { answered, finish } = requestInFlight(base);
      await sleep(300);
      server.child.kill(first);
      await sleep(20);
      server.child.kill(second);
      await sleep(300);
      finish();
      const { status, body } = await answered;
      expect([status, JSON.parse(body).error]).toEqual([400, 'Email and password are required']);
      expect(await exitWithin(server, 10_000), server.output()).toBe(0);
      const lines = server.output().trim().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
      expect(lines.filter((line) => line.msg.startsWith('a repeat of the shutdown signal ignored'))).toEqual([expect.objectContaining({ signal: second, windowMs: 1_000 })]);
      expect(lines.at(-1)).toMatchObject({ msg: 'shut down', signal: first });
    });
  }

  it('a second signal more than 1 s later, while the shutdown waits on a request, still ends the process at once', async () => {
    const { server, base } = await startHealthy();
    const { answered } = requestInFlight(base);
    const outcome = answered.then(() => 'answered', () => 'cut');
    await sleep(300);
    server.child.kill('SIGTERM');
    await sleep(1_300);
    server.child.kill('SIGINT');
    // Ended by the signal, as Node ends a process with no handler for it: no exit code.
    expect(await exitWithin(server, 5_000), server.output()).toBe(null);
    expect(server.child.signalCode).toBe('SIGINT');
    expect(await outcome).toBe('cut');
    expect(server.output()).toContain('"msg":"shutting down"');
    expect(server.output()).not.toContain('"msg":"shut down"');
  });
});

describe('SIGHUP (the terminal the server ran in closed)', () => {
  it('shuts down as SIGTERM does: logged, clean, exit 0', async () => {
    const { server } = await startHealthy();
    server.child.kill('SIGHUP');
    expect(await server.exited).toBe(0);
    const lines = server.output().trim().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line));
    expect(lines.find((line) => line.msg === 'shutting down')).toMatchObject({ signal: 'SIGHUP' });
    expect(lines.at(-1)).toMatchObject({ msg: 'shut down', signal: 'SIGHUP' });
  });
});

describe('readiness withdrawn before the shutdown (SHUTDOWN_DELAY_MS)', () => {
  const start = (delayMs: number) => startHealthy({ SHUTDOWN_DELAY_MS: String(delayMs) });

  it('after SIGTERM, /health answers 503 while other requests are still served; then the shutdown runs and exits 0', async () => {
    const { server, base } = await start(2_000);
    const signalled = performance.now();
    server.child.kill('SIGTERM');
    await sleep(300);
    const health = await fetch(`${base}/health`);
    expect(health.status).toBe(503);
    expect(health.headers.get('retry-after')).toBe('5');
    expect(await health.json()).toMatchObject({ success: false, status: 'error', error: 'Server is shutting down', statusCode: 503 });
    // Served as before, on a new connection and without Connection: close.
    const served = await fetch(`${base}/api/auth/signin`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect([served.status, ((await served.json()) as { error: string }).error, served.headers.get('connection')]).toEqual([400, 'Email and password are required', 'keep-alive']);
    expect(await server.exited).toBe(0);
    expect(performance.now() - signalled).toBeGreaterThanOrEqual(2_000);
    const messages = server.output().trim().split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line).msg);
    expect(messages.indexOf('readiness withdrawn: /health answers 503 until the shutdown begins')).toBeGreaterThan(-1);
    expect(messages.indexOf('shutting down')).toBeGreaterThan(messages.indexOf('readiness withdrawn: /health answers 503 until the shutdown begins'));
    expect(messages.at(-1)).toBe('shut down');
  });

  it('a second signal ends the wait: the shutdown begins at once', async () => {
    const { server, base } = await start(60_000);
    server.child.kill('SIGTERM');
    await sleep(300);
    expect((await fetch(`${base}/health`)).status).toBe(503);
    // A second one within 1 s is taken for a copy of the first (npm's) and ignored.
    server.child.kill('SIGTERM');
    await sleep(1_000);
    expect((await fetch(`${base}/health`)).status).toBe(503);
    server.child.kill('SIGINT');
    expect(await exitWithin(server, 10_000)).toBe(0);
    expect(server.output()).toContain('"msg":"shut down"');
  });
});

/**
 * A TCP proxy in front of this run's PostgreSQL, as the auditor's: `down` cuts
 * every connection at once (a database that is down); otherwise each
 * connection is passed on after `delayMs` (a database slow to answer).
 */
async function startPostgresProxy(state: { down: boolean; delayMs: number }) {
  const postgresUrl = new URL(inject('stack').databaseUrl);
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
  };
  const proxy = net.createServer((client) => {
    track(client);
    if (state.down) return void client.destroy();
    setTimeout(() => {
      if (client.destroyed) return;
      const upstream = net.connect(Number(postgresUrl.port), postgresUrl.hostname);
      track(upstream);
      upstream.on('close', () => client.destroy());
      client.on('close', () => upstream.destroy());
      client.pipe(upstream).pipe(client);
    }, state.delayMs);
  });
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  const viaProxy = new URL(postgresUrl);
  viaProxy.port = String((proxy.address() as net.AddressInfo).port);
  return {
    url: viaProxy.toString(),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => proxy.close(resolve));
    },
  };
}

describe('a login too strong, found when the database first answers', () => {
  const cleanups: (() => Promise<unknown>)[] = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  /** The server in production against `databaseUrl`, with every secret, logging nothing unless told. */
  async function startProduction(databaseUrl: string, logLevel = 'silent') {
    const port = await freePort();
    const server = startServer({
      NODE_ENV: 'production',
      PORT: String(port),
      LOG_LEVEL: logLevel,
      DATABASE_URL: databaseUrl,
      SUPABASE_JWT_SECRET: TEST_JWT_SECRET,
      ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
      ANALYTICS_SALT_SECRET: 'analytics-salt-secret-0123456789abcdef-0123',
      CAPTCHA_PROVIDER: 'off',
      FEEDBACK_OUTBOX_WORKER: 'false',
    });
    cleanups.push(async () => {
      if (server.child.exitCode === null) server.child.kill('SIGKILL');
      await server.exited;
    });
    /** The status of GET /health, or undefined while the server does not listen. */
    const health = () => fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(5_000) }).then((response) => response.status, () => undefined);
    return { ...server, health };
  }

  /** Production stops, exit code 1, with the one line naming the too-strong login. */
  async function expectStoppedForSuperuser(server: Awaited<ReturnType<typeof startProduction>>) {
    expect(await exitWithin(server, 15_000), server.output()).toBe(1);
    expect(server.output().trim().split('\n')).toEqual([expect.stringMatching(/^Invalid configuration: DATABASE_URL connects as postgres, a superuser/)]);
  }

  async function untilHealth(server: Awaited<ReturnType<typeof startProduction>>, status: number) {
    for (let attempt = 0; attempt < 100; attempt += 1) {
      if ((await server.health()) === status) return;
      await sleep(100);
    }
    throw new Error(`GET /health never answered ${status}:\n${server.output()}`);
  }

  it('the database answers after the start (3 s): production stops with the one line naming DATABASE_URL, exit code 1', async () => {
    const proxy = await startPostgresProxy({ down: false, delayMs: 3_000 });
    cleanups.push(proxy.close);
    const server = await startProduction(proxy.url);
    await expectStoppedForSuperuser(server);
  });

  it('the database is down at the start: production serves 503, then stops with the one line once it is up', async () => {
    const state = { down: true, delayMs: 0 };
    const proxy = await startPostgresProxy(state);
    cleanups.push(proxy.close);
    const server = await startProduction(proxy.url);
    await untilHealth(server, 503);
    state.down = false;
    await expectStoppedForSuperuser(server);
  });

  it('the database is down at the start, then refuses the login: production serves 503, then stops with the one line naming DATABASE_URL', async () => {
    const state = { down: true, delayMs: 0 };
    const proxy = await startPostgresProxy(state);
    cleanups.push(proxy.close);
    const server = await startProduction(asLoginRole(proxy.url, 'no_such_login_role'));
    await untilHealth(server, 503);
    state.down = false;
    expect(await exitWithin(server, 15_000), server.output()).toBe(1);
    expect(server.output().trim().split('\n')).toEqual([
      'Invalid configuration: DATABASE_URL is refused by the database: role "no_such_login_role" does not exist (SQLSTATE 28000)',
    ]);
  });

  it('the database is down at the start and the login is right: the API starts, answers 503, and recovers', async () => {
    const state = { down: true, delayMs: 0 };
    const proxy = await startPostgresProxy(state);
    cleanups.push(proxy.close);
    const server = await startProduction(asLoginRole(proxy.url), 'info');
    await untilHealth(server, 503);
    state.down = false;
    await untilHealth(server, 200);
    expect(server.child.exitCode).toBeNull();
    // The log says the database was silent at the start, and when it answered.
    const messages = () => server.output().trim().split('\n').map((line) => JSON.parse(line) as { level: number; msg: string });
    await expect.poll(() => messages().some((line) => line.msg === 'the database answers'), { timeout: 5_000 }).toBe(true);
    const silent = messages().findIndex((line) => line.level === 40 && line.msg.startsWith('the database does not answer at the start'));
    expect(silent).toBeGreaterThan(-1);
    expect(messages().findIndex((line) => line.msg === 'the database answers')).toBeGreaterThan(silent);
  });
});
