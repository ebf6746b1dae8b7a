import { execFileSync, spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, rm, symlink, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { serverOptions } from '../src/app.ts';
import { parseConfig } from '../src/config.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/secrets.ts';
import { exitWithin, type SpawnedServer, startServer } from './support/spawned-server.ts';

// What an operator gets wrong at `npm start` ends the start with one line
// naming the variable, exit code 1, never a stack trace: a URL its client
// cannot read (and the password in it is never printed), a file or host that
// is not there, a login the database refuses for good. Found once the log has
// begun (a taken port, the database's answer), that line is a log entry at
// error, JSON as the lines before it; as text only with LOG_LEVEL=silent.

/** Production with every secret, so that only the setting under test is wrong. */
const PRODUCTION = {
  NODE_ENV: 'production',
  SUPABASE_JWT_SECRET: TEST_JWT_SECRET,
  ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
  ANALYTICS_SALT_SECRET: 'analytics-salt-secret-0123456789abcdef-0123',
  CAPTCHA_PROVIDER: 'off',
};

const started: SpawnedServer[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) {
    if (server.child.exitCode === null) server.child.kill('SIGKILL');
    await server.exited;
  }
});

/** The server in production with `env` over a right login to this run's database, on a free port. */
async function start(env: Record<string, string>): Promise<SpawnedServer> {
  const server = startServer({ ...PRODUCTION, DATABASE_URL: asLoginRole(inject('stack').databaseUrl), PORT: String(await freePort()), ...env });
  started.push(server);
  return server;
}

/** The start ends with exit code 1 and `line` as the log's last entry, at error (JSON), with no line of text at all. */
async function expectStoppedInTheLog(server: SpawnedServer, line: string) {
  expect(await exitWithin(server, 15_000), server.output()).toBe(1);
  const lines = server.output().trim().split('\n');
  // Every line parses: nothing a log shipper would drop or misread.
  const entries = lines.map((entry) => JSON.parse(entry) as { level: number; msg: string });
  expect(entries.at(-1)).toMatchObject({ level: 50, msg: line });
}

/** The start ends with exit code 1 and `line` alone (log entries aside, which are JSON). */
async function expectStopped(server: SpawnedServer, line: RegExp | string) {
  expect(await exitWithin(server, 15_000), server.output()).toBe(1);
  const lines = server.output().trim().split('\n').filter((entry) => !entry.startsWith('{'));
  expect(lines).toEqual([typeof line === 'string' ? line : expect.stringMatching(line)]);
}

describe('a URL its client cannot read', () => {
  const POSTGRES = 'must be a URL such as postgres://user:password@host:5432/database';

  it('DATABASE_URL with a bad port: one line naming it, the password not printed', async () => {
    const server = await start({ DATABASE_URL: 'postgres://portfolio_api:SuperSecretPW@127.0.0.1:54x/portfolio_dev' });
    await expectStopped(server, `Invalid configuration: DATABASE_URL is invalid (${POSTGRES})`);
    expect(server.output()).not.toContain('SuperSecretPW');
  });

  it('DATABASE_URL that is no URL, or has a bad escape: one line naming it', async () => {
    await expectStopped(await start({ DATABASE_URL: 'notaurl' }), `Invalid configuration: DATABASE_URL is invalid (${POSTGRES})`);
    const escaped = await start({ DATABASE_URL: 'postgres://portfolio_api:Super%zzSecretPW@127.0.0.1:5432/portfolio_dev' });
    await expectStopped(escaped, `Invalid configuration: DATABASE_URL is invalid (${POSTGRES}; a % in the user name or password must be written %25)`);
    expect(escaped.output()).not.toContain('SecretPW');
  });

  it('REDIS_URL with a bad port: one line naming it, the password not printed', async () => {
    const server = await start({ REDIS_URL: 'redis://:SecretRedisPW@127.0.0.1:6x79' });
    await expectStopped(server, /^Invalid configuration: REDIS_URL is invalid \(must be a URL such as redis:/);
    expect(server.output()).not.toContain('SecretRedisPW');
  });
});

describe('two settings that contradict each other', () => {
  const BELOW_POOL = (pool: number) =>
    `must be below DATABASE_POOL_MAX (${pool}): each submission with a screenshot holds a database connection, and with all of them held every other request waits`;

  it('FEEDBACK_SCREENSHOTS_AT_ONCE at or above DATABASE_POOL_MAX: one line naming both, exit code 1', async () => {
    await expectStopped(
      await start({ FEEDBACK_SCREENSHOTS_AT_ONCE: '500', DATABASE_POOL_MAX: '100' }),
      `Invalid configuration: FEEDBACK_SCREENSHOTS_AT_ONCE is invalid (${BELOW_POOL(100)})`,
    );
    // The default pool (10) counts too.
    await expectStopped(await start({ FEEDBACK_SCREENSHOTS_AT_ONCE: '10' }), `Invalid configuration: FEEDBACK_SCREENSHOTS_AT_ONCE is invalid (${BELOW_POOL(10)})`);
  });

  it('below the pool it is taken; unset, it fits the pool (2, or one less than a pool of 2, and 1 for a pool of 1)', () => {
    const env = { ...PRODUCTION, DATABASE_URL: 'postgres://portfolio_api@127.0.0.1:5432/portfolio' };
    const screenshotsAtOnce = (settings: Record<string, string | undefined>) => parseConfig({ ...env, ...settings }).FEEDBACK_SCREENSHOTS_AT_ONCE;
    expect(screenshotsAtOnce({ FEEDBACK_SCREENSHOTS_AT_ONCE: '9' })).toBe(9);
    expect(() => screenshotsAtOnce({ FEEDBACK_SCREENSHOTS_AT_ONCE: '4', DATABASE_POOL_MAX: '4' })).toThrowError(`FEEDBACK_SCREENSHOTS_AT_ONCE is invalid (${BELOW_POOL(4)})`);
    expect([{}, { DATABASE_POOL_MAX: '3' }, { DATABASE_POOL_MAX: '2' }, { DATABASE_POOL_MAX: '1' }].map(screenshotsAtOnce)).toEqual([2, 2, 1, 1]);
    // Either setting bad on its own is named as such, and nothing more.
    expect(() => screenshotsAtOnce({ FEEDBACK_SCREENSHOTS_AT_ONCE: '3', DATABASE_POOL_MAX: 'many' })).toThrowError(
      /^Invalid configuration: DATABASE_POOL_MAX is invalid \(must be a positive whole number\)$/,
    );
  });
});

describe('a file or a host that is not there', () => {
  it('ANALYTICS_COUNTRY_DB names no file: one line naming it', async () => {
    const server = await start({ ANALYTICS_COUNTRY_DB: '/nonexistent/country.mmdb', LOG_LEVEL: 'silent' });
    await expectStopped(server, /^ANALYTICS_COUNTRY_DB names no country database this process can read \(ENOENT\): /);
  });

  it('ANALYTICS_COUNTRY_DB names a file that is no country database: one line naming it', async () => {
    const server = await start({ ANALYTICS_COUNTRY_DB: import.meta.filename, LOG_LEVEL: 'silent' });
    await expectStopped(server, /^ANALYTICS_COUNTRY_DB names no country database this process can read \(not a MaxMind-format database: /);
  });

  it('HOST that no resolver knows: one line naming it', async () => {
    const server = await start({ HOST: 'nosuchhost.invalid', LOG_LEVEL: 'silent' });
    // ENOTFOUND, or EAI_AGAIN where no name server answers at all.
    await expectStopped(server, /^HOST nosuchhost\.invalid (is not a name this machine can resolve|could not be resolved)/);
  });
});

/**
 * A stand-in for PostgreSQL that refuses every login with `code` and
 * `message`, the ErrorResponse a server sends for the startup message: the
 * local server trusts every login, so it never says a password is wrong.
 */
async function startLoginRefuser(code: string, message: string, { delayMs = 0 } = {}) {
  const fields = [
    ['S', 'FATAL'],
    ['V', 'FATAL'],
    ['C', code],
    ['M', message],
  ];
  const body = Buffer.concat([...fields.map(([type, value]) => Buffer.from(`${type}${value}\0`)), Buffer.from('\0')]);
  const length = Buffer.alloc(4);
  length.writeInt32BE(body.length + 4);
  const refusal = Buffer.concat([Buffer.from('E'), length, body]);
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    // A delay past the start's wait (2 s) has the login judged after the start.
    socket.once('data', () => setTimeout(() => socket.end(refusal), delayMs));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

describe('a login the database refuses for good', () => {
  const REFUSED = 'Invalid configuration: DATABASE_URL is refused by the database: ';

  it('a role that does not exist (28000): one line naming DATABASE_URL and the reason, exit code 1', async () => {
    const server = await start({ DATABASE_URL: asLoginRole(inject('stack').databaseUrl, 'no_such_login_role'), LOG_LEVEL: 'silent' });
    await expectStopped(server, `${REFUSED}role "no_such_login_role" does not exist (SQLSTATE 28000)`);
  });

  it('a database that does not exist (3D000), in development too', async () => {
    const url = new URL(asLoginRole(inject('stack').databaseUrl));
    url.pathname = '/no_such_database';
    const server = await start({ NODE_ENV: 'development', DATABASE_URL: url.toString(), LOG_LEVEL: 'silent' });
    await expectStopped(server, `${REFUSED}database "no_such_database" does not exist (SQLSTATE 3D000)`);
  });

  it.each([
    ['a wrong password', '28P01', 'password authentication failed for user "portfolio_api"'],
    ['a role not granted service_role', '42501', 'permission denied to set role "service_role"'],
  ])('%s (%s): the reason, never the password', async (_, code, reason) => {
    const refuser = await startLoginRefuser(code, reason);
    try {
      const server = await start({ DATABASE_URL: `postgres://portfolio_api:SuperSecretPW@127.0.0.1:${refuser.port}/portfolio_dev`, LOG_LEVEL: 'silent' });
      await expectStopped(server, `${REFUSED}${reason} (SQLSTATE ${code})`);
      expect(server.output()).not.toContain('SuperSecretPW');
    } finally {
      await refuser.close();
    }
  });
});

describe('refused once the log has begun: the line is a log entry (JSON, error), exit code 1', () => {
  it('a taken PORT', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as net.AddressInfo;
    try {
      const server = await start({ PORT: String(port), LOG_LEVEL: 'info' });
      await expectStoppedInTheLog(server, `port ${port} on 127.0.0.1 is taken: stop what listens there, or set PORT`);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });

  it('a login the database refuses at the start (28000)', async () => {
    const server = await start({ DATABASE_URL: asLoginRole(inject('stack').databaseUrl, 'no_such_login_role'), LOG_LEVEL: 'info' });
    await expectStoppedInTheLog(server, 'Invalid configuration: DATABASE_URL is refused by the database: role "no_such_login_role" does not exist (SQLSTATE 28000)');
  });

  it('a login the database refuses only after the start (28P01, answered after 3 s): the password never printed', async () => {
    const reason = 'password authentication failed for user "portfolio_api"';
    const refuser = await startLoginRefuser('28P01', reason, { delayMs: 3_000 });
    try {
      const server = await start({ DATABASE_URL: `postgres://portfolio_api:SuperSecretPW@127.0.0.1:${refuser.port}/portfolio_dev`, LOG_LEVEL: 'info' });
      await expectStoppedInTheLog(server, `Invalid configuration: DATABASE_URL is refused by the database: ${reason} (SQLSTATE 28P01)`);
      // It had started: the refusal came after the start's own entries.
      expect(server.output()).toContain('"msg":"portfolio-backend started"');
      expect(server.output()).not.toContain('SuperSecretPW');
    } finally {
      await refuser.close();
    }
  });
});

describe('a dependency patch not in effect (npm ci --ignore-scripts, a patch that did not apply)', () => {
  const ROOT = path.resolve(import.meta.dirname, '..');

  it('postgres.js as published: one line naming the patch and the fix, exit code 1, before the log begins', async () => {
    // The server's sources beside this checkout's packages, postgres.js copied and its patch taken back out.
    const copy = await mkdtemp(path.join(tmpdir(), 'start-unpatched-'));
    try {
      for (const part of ['package.json', 'src']) await cp(path.join(ROOT, part), path.join(copy, part), { recursive: true });
      await mkdir(path.join(copy, 'node_modules'));
      for (const name of await readdir(path.join(ROOT, 'node_modules'))) {
        if (name !== 'postgres') await symlink(path.join(ROOT, 'node_modules', name), path.join(copy, 'node_modules', name));
      }
      await cp(path.join(ROOT, 'node_modules/postgres'), path.join(copy, 'node_modules/postgres'), { recursive: true });
      execFileSync('patch', ['-R', '-p1', '-s', '-d', copy, '-i', path.join(ROOT, 'patches/postgres+3.4.9.patch')]);

      const env = { ...PRODUCTION, DATABASE_URL: asLoginRole(inject('stack').databaseUrl), PORT: String(await freePort()), LOG_LEVEL: 'info' };
      const child = spawn(process.execPath, [path.join(copy, 'src/server.ts')], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      const server: SpawnedServer = { child, exited: new Promise((resolve) => child.on('exit', resolve)), output: () => output };
      started.push(server);
      await expectStopped(
        server,
        'postgres is not patched (patches/postgres+3.4.9.patch is not in effect in node_modules/postgres/src/connection.js): run npm ci (install scripts on: its postinstall applies the patch) or npx patch-package',
      );
      // Refused before the app was built: nothing was logged, nothing listened.
      expect(output).not.toContain('{');
    } finally {
      await rm(copy, { recursive: true, force: true });
    }
  });
});

describe('a start past Fastify\'s pluginTimeout (a machine short of CPU)', () => {
  it('the timeout is well above a loaded boot (20–25 s wall), and reaching it ends the start with one JSON log entry, exit code 1', async () => {
    const env = { ...PRODUCTION, DATABASE_URL: asLoginRole(inject('stack').databaseUrl), PORT: String(await freePort()), LOG_LEVEL: 'info', REQUEST_TIMEOUT_MS: '60000' };
    const { pluginTimeout } = serverOptions(parseConfig(env));
    expect(pluginTimeout).toBeGreaterThanOrEqual(60_000);
    // Starved of CPU, the boot would outlast it: here its timer is made to fire at once instead.
    const directory = await mkdtemp(path.join(tmpdir(), 'start-timeout-'));
    try {
      const preload = path.join(directory, 'plugin-timeout-now.mjs');
      await writeFile(
        preload,
        `const real = globalThis.setTimeout;\nglobalThis.setTimeout = (fn, ms, ...args) => real(fn, ms === ${pluginTimeout} ? 1 : ms, ...args);\n`,
      );
      const child = spawn(process.execPath, ['--import', pathToFileURL(preload).href, path.resolve(import.meta.dirname, '../src/server.ts')], {
        env: { PATH: process.env.PATH ?? '', ...env },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      const server: SpawnedServer = { child, exited: new Promise((resolve) => child.on('exit', resolve)), output: () => output };
      started.push(server);
      expect(await exitWithin(server, 15_000), output).toBe(1);
      // Every line is JSON, the last the refusal at error; no plain-text FastifyError.
      const entries = output.trim().split('\n').map((line) => JSON.parse(line) as { level: number; msg: string; err?: { code?: string } });
      expect(entries.at(-1)).toMatchObject({
        level: 50,
        msg: expect.stringMatching(/^the app did not start in time \(plugin '[\w-]+' still loading past Fastify's pluginTimeout\): the machine is short of CPU/),
        err: { code: 'AVV_ERR_PLUGIN_EXEC_TIMEOUT' },
      });
    } finally {
      await rm(directory, { recursive: true, force: true });
    }
  });
});
