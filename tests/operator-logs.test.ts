import { randomBytes } from 'node:crypto';
import { SignJWT } from 'jose';
import { prettyFactory } from 'pino-pretty';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import { LogSink } from '../src/lib/log-sink.ts';
import { LOG_LEVELS, PRETTY } from '../src/logger.ts';
import { buildTestAppWithLog, testConfig } from './support/app.ts';
import { usePrivateDatabase } from './support/private-database.ts';

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
