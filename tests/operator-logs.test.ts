import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { SignJWT } from 'jose';
import { prettyFactory } from 'pino-pretty';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { buildApp } from '../src/app.ts';
import { LogSink } from '../src/lib/log-sink.ts';
import { LOG_LEVELS, PRETTY } from '../src/logger.ts';
import { legacyAdmin, signedInUser } from './support/admin-auth.ts';
import { buildTestAppWithLog, testConfig } from './support/app.ts';
import { testSql } from './support/db.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase, usePrivateDatabase } from './support/private-database.ts';

// What an operator reads in the log, and what must never be there: a
// credential of ours, an error row anyone can write at will, a warning that
// sends them after a setting that is right.

const database = usePrivateDatabase('operatorlogs');

/** The sink of the app's own logger (loggerOptions, as in production), keeping each line it is given as well. */
class RecordingSink extends LogSink {
  readonly lines: string[] = [];

  override write(line: string): void {
    this.lines.push(line);
    super.write(line);
  }
}

/** The app as production logs: its own logger, warn and above to `sink` and from there to app_logs of this file's database. */
async function appLoggingTo(sink: LogSink, overrides: Parameters<typeof testConfig>[0] = {}) {
  return buildApp({
    config: testConfig({ DATABASE_URL: database.url, ...overrides }),
    logSink: sink,
    rateLimit: { redisNamespace: `test-operator-logs:${randomBytes(6).toString('hex')}:` },
  });
}

const parsed = (lines: string[]) => lines.map((line) => JSON.parse(line) as Record<string, unknown> & { level: number; msg: string });

describe('a REDIS_URL whose user and password Redis refuses', () => {
  it('says the rate-limit store is unavailable, without the password: not in the line, not in app_logs', async () => {
    const password = `SekretRedisPw${randomBytes(6).toString('hex')}`;
    const sink = new RecordingSink();
    const app = await appLoggingTo(sink, { REDIS_URL: `redis://opsuser:${password}@127.0.0.1:6379/0` });
    const unavailable = () => parsed(sink.lines).filter((line) => line.msg === 'rate-limit store (Redis) unavailable: counting in this process meanwhile');
    try {
      await expect.poll(() => unavailable().length, { timeout: 10_000 }).toBeGreaterThan(0);
      // Refused for its credentials (ioredis's ReplyError to the AUTH it sent on connecting), the command named, its arguments not.
      expect(unavailable()[0]).toMatchObject({ level: 40, err: { type: 'ReplyError', message: expect.stringMatching(/^WRONGPASS/), command: { name: 'auth', args: '[redacted]' } } });
      // Requests are counted meanwhile, in the process.
      expect((await app.inject({ method: 'GET', url: '/api/no-such-route' })).statusCode).toBe(404);
    } finally {
      // Closing stores whatever is still queued.
      await app.close();
    }
    expect(sink.lines.filter((line) => line.includes(password))).toEqual([]);
    const stored = await database.sql<{ message: string; context: string }[]>`
      select message, context::text as context from public.app_logs where source = 'server' and message like 'rate-limit store (Redis) unavailable%'`;
    expect(stored.length).toBeGreaterThan(0);
    expect(stored.filter((row) => row.context.includes(password))).toEqual([]);
    const anywhere = await database.sql`select id from public.app_logs where strpos(message || context::text, ${password}) > 0`;
    expect(anywhere).toEqual([]);
  });
});

describe('the terminal output (pino-pretty, as server.ts starts it on a TTY)', () => {
  it('names every level by its name, not USERLVL', () => {
    const pretty = prettyFactory({ ...PRETTY.options, colorize: false });
    for (const [name, level] of Object.entries(LOG_LEVELS)) {
      expect(pretty(JSON.stringify({ level, time: 0, msg: `a line at ${name}` }))).toContain(`${name.toUpperCase()}: a line at ${name}`);
    }
  });
});

describe('Supabase Auth not configured (no SUPABASE_URL, no SUPABASE_ANON_KEY)', () => {
  it('answers the auth routes 503 as ever, each logged as a refusal: warn, no stack, not stored', async () => {
    const sink = new RecordingSink();
    const app = await appLoggingTo(sink);
    const calls = [
      { url: '/api/auth/signin', payload: { email: 'someone@example.com', password: 'a-password' } },
      { url: '/api/auth/refresh', payload: { refreshToken: 'a-refresh-token' } },
      { url: '/api/auth/signup', payload: { email: 'someone@example.com', password: 'a-password-123', name: 'Someone' } },
      // The dashboard's sign-in form, open to anyone as well.
      { url: '/admin/status/session', payload: { email: 'someone@example.com', password: 'a-password' } },
    ];
    try {
      for (const { url, payload } of calls) {
        const response = await app.inject({ method: 'POST', url, payload });
        expect(response.statusCode, url).toBe(503);
        expect(response.headers['retry-after']).toBe('5');
        expect(response.json()).toEqual({ success: false, error: 'Authentication service unavailable', statusCode: 503, requestId: expect.any(String) });
      }
    } finally {
      await app.close();
    }
    const lines = parsed(sink.lines);
    expect(lines.filter((line) => line.level >= 50)).toEqual([]);
    const refused = lines.filter((line) => line.msg === 'request refused' && line.statusCode === 503);
    expect(refused.map((line) => line.route)).toEqual(calls.map((call) => call.url));
    for (const line of refused) {
      expect(line).toMatchObject({ level: 40, persist: false, error: 'Authentication service unavailable', reason: 'Supabase Auth is not configured: SUPABASE_URL and SUPABASE_ANON_KEY are not set' });
      expect(line).not.toHaveProperty('err');
    }
    const stored = await database.sql<{ message: string }[]>`
      select message from public.app_logs where source = 'server' and (level = 'error' or message in ('request failed', 'request refused'))`;
    expect(stored).toEqual([]);
  });
});

describe('an HS256 token without `iss` that fails its signature check, SUPABASE_URL unset', () => {
  it('is refused (401) with no word of SUPABASE_JWT_SECRET being the wrong project’s: there is no project', async () => {
    const { app, lines } = await buildTestAppWithLog({}, 'warn');
    try {
      const garbage = await new SignJWT({ role: 'authenticated', aud: 'authenticated' })
        .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
        .setSubject(crypto.randomUUID())
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode('not-the-secret-of-this-api-0123456789abcdef'));
      const response = await app.inject({ method: 'GET', url: '/api/auth/me', headers: { authorization: `Bearer ${garbage}` } });
      expect(response.statusCode).toBe(401);
      expect(parsed(lines).filter((line) => line.msg.includes('SUPABASE_JWT_SECRET'))).toEqual([]);
    } finally {
      await app.close();
    }
  });
});

describe('Supabase Auth half configured', () => {
  it('names the setting that is missing in the start’s warning (production)', async () => {
    const notConfigured = async (overrides: Parameters<typeof testConfig>[0]) => {
      const { app, lines } = await buildTestAppWithLog({ NODE_ENV: 'production', ...overrides }, 'warn');
      await app.close();
      return parsed(lines).filter((line) => line.msg.startsWith('Supabase Auth is not configured'));
    };
    expect(await notConfigured({ SUPABASE_URL: 'http://127.0.0.1:54321' })).toEqual([
      expect.objectContaining({
        level: 40,
        msg: 'Supabase Auth is not configured (SUPABASE_URL, SUPABASE_ANON_KEY): SUPABASE_ANON_KEY is not set; sign up, sign in and the other /api/auth routes answer 503',
      }),
    ]);
    expect(await notConfigured({ SUPABASE_ANON_KEY: 'anon' })).toEqual([
      expect.objectContaining({ msg: expect.stringMatching(/^Supabase Auth is not configured \(SUPABASE_URL, SUPABASE_ANON_KEY\): SUPABASE_URL is not set;/) }),
    ]);
  });
});

describe('the `request completed` line', () => {
  it("names who asked: a signed-in user's id, the legacy admin token as `legacy-admin:<userId>`; nothing for anonymous or refused callers, and never an e-mail or token", async () => {
    const sql = testSql();
    const { app, lines } = await buildTestAppWithLog({}, 'http', async (extended) => {
      extended.get('/test/fails-for-admins', { onRequest: extended.requireRole('admin') }, async () => {
        throw new Error('a failure of the test route');
      });
    });
    try {
      const user = await signedInUser(sql);
      const [{ email }] = await sql<{ email: string }[]>`select email from auth.users where id = ${user.id}`;
      const adminId = crypto.randomUUID();
      const admin = await legacyAdmin(adminId);
      const asked = [
        { label: 'user', method: 'GET', url: '/api/auth/me', headers: { authorization: user.authorization }, statusCode: 200, userId: user.id },
        { label: 'admin', method: 'GET', url: '/api/websites', headers: admin, statusCode: 200, userId: `legacy-admin:${adminId}` },
        { label: 'anonymous', method: 'GET', url: '/health', headers: {}, statusCode: 200, userId: undefined },
        // A token refused is nobody known: the line must not name the user it claims to be.
        { label: 'refused', method: 'GET', url: '/api/auth/me', headers: { authorization: `${user.authorization}x` }, statusCode: 401, userId: undefined },
      ] as const;
      for (const { label, method, url, headers } of asked) {
        await app.inject({ method, url, headers: { ...headers, 'x-request-id': `user-id-line-${label}` } });
      }
      const completed = parsed(lines).filter((line) => line.msg === 'request completed' && String(line.requestId).startsWith('user-id-line-'));
      expect(completed.map((line) => [line.requestId, line.statusCode, line.userId])).toEqual(
        asked.map(({ label, statusCode, userId }) => [`user-id-line-${label}`, statusCode, userId]),
      );
      for (const line of completed.filter((line) => line.userId === undefined)) expect(line).not.toHaveProperty('userId');
      // The 5xx's own line, the one an on-call reads first, names the caller too.
      expect((await app.inject({ url: '/test/fails-for-admins', headers: admin })).statusCode).toBe(500);
      const failed = parsed(lines).filter((line) => line.msg === 'request failed' && line.route === '/test/fails-for-admins');
      expect(failed.map((line) => line.userId)).toEqual([`legacy-admin:${adminId}`]);
      const token = user.authorization.slice('Bearer '.length);
      expect(lines.filter((line) => line.includes(email) || line.includes(token) || line.includes(admin.authorization.slice('Bearer '.length)))).toEqual([]);
    } finally {
      await app.close();
      await sql.end();
    }
  });
});

describe('storing the log while the database cannot take it', () => {
  /**
   * The app on `databaseUrl`, logging to a RecordingSink, with a last plugin
   * that logs a warning and takes 1.5 s to load: the stored log's flush
   * (every second) comes round while the app is still starting.
   */
  async function slowStartOn(sink: RecordingSink, databaseUrl: string) {
    return buildApp(
      { config: testConfig({ DATABASE_URL: databaseUrl }), logSink: sink, rateLimit: { redisNamespace: `test-operator-logs:${randomBytes(6).toString('hex')}:` } },
      {
        extend: async (app) => {
          app.log.warn('a warning of the start, to be stored');
          await sleep(1_500);
        },
      },
    );
  }
  const storingFailed = (sink: RecordingSink) => parsed(sink.lines).filter((line) => line.msg === 'storing log entries failed');

  it('a login the database refuses: the start ends with its own line, and no entry was tried before it', { timeout: 30_000 }, async () => {
    const sink = new RecordingSink();
    const url = new URL(inject('stack').databaseUrl);
    url.pathname = '/no_such_database';
    await expect(slowStartOn(sink, url.toString())).rejects.toThrowError(
      'Invalid configuration: DATABASE_URL is refused by the database: database "no_such_database" does not exist (SQLSTATE 3D000)',
    );
    // A flush would have come round by now; it would have failed on the same login.
    await sleep(1_500);
    expect(storingFailed(sink)).toEqual([]);
  });

  it('a database without the migrations: the schema warning first, then each failed batch on one line with the reason, no stack', { timeout: 30_000 }, async () => {
    const unmigrated = await createPrivateDatabase('oplogs_unmigrated', { migrated: false });
    const sink = new RecordingSink();
    try {
      const app = await slowStartOn(sink, unmigrated.url);
      try {
        await waitFor(() => storingFailed(sink)[0], 10_000, 'a failed batch');
        const lines = parsed(sink.lines);
        const behind = lines.findIndex((line) => line.msg === 'the database schema is behind the code (it has no public.applied_migration_versions): run npm run migrate');
        const failed = lines.findIndex((line) => line.msg === 'storing log entries failed');
        expect([behind >= 0, behind < failed]).toEqual([true, true]);
        expect(lines[failed]).toEqual({
          level: 50,
          time: expect.any(Number),
          pid: process.pid,
          hostname: expect.any(String),
          code: '42P01',
          error: 'relation "public.app_logs" does not exist',
          lost: expect.any(Number),
          persist: false,
          msg: 'storing log entries failed',
        });
      } finally {
        await app.close();
      }
    } finally {
      await unmigrated.drop();
    }
    expect(sink.lines.filter((line) => line.includes('stack'))).toEqual([]);
  });

  it('a database that does not answer: each failed batch on one line with the reason, no stack', { timeout: 30_000 }, async () => {
    const sink = new RecordingSink();
    const app = await slowStartOn(sink, `postgres://authenticator@127.0.0.1:${await freePort()}/nowhere`);
    try {
      const [failed] = await waitFor(() => (storingFailed(sink).length > 0 ? storingFailed(sink) : undefined), 10_000, 'a failed batch');
      expect(failed).toMatchObject({ level: 50, code: 'ECONNREFUSED', error: expect.stringContaining('ECONNREFUSED'), lost: expect.any(Number) });
      expect(failed).not.toHaveProperty('err');
    } finally {
      await app.close();
    }
    // The start's own warning came first.
    const lines = parsed(sink.lines).map((line) => line.msg);
    expect(lines.indexOf('storing log entries failed')).toBeGreaterThan(lines.findIndex((msg) => msg.startsWith('the database does not answer at the start')));
  });
});
