import Fastify, { type FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LogSink, parseLine } from '../src/lib/log-sink.ts';
import { insertServerLogEntriesElevated } from '../src/modules/logs/queries.ts';
import appLogsPlugin from '../src/modules/logs/worker.ts';
import dbPlugin from '../src/plugins/db.ts';
import metricsPlugin from '../src/plugins/metrics.ts';
import { buildTestApp, testConfig } from './support/app.ts';
import { expectRefused, useAdminApp } from './support/admin-auth.ts';
import { asUser, createAuthUser, grantRole, testSql, uniqueEmail } from './support/db.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// /api/admin with the legacy admin token (the only admin credential usable
// without an auth server, see docs/admin.md), refused tokens, stored logs
// and their row-level security.

let app: FastifyInstance;
const sql = testSql();
let admin: { authorization: string };

useAdminApp(sql, (built) => ({ app, admin } = built));

describe('admin routes refuse callers without a valid admin token', () => {
  it.each([
    ['GET', '/api/admin/health'],
    ['GET', '/api/admin/metrics'],
    ['GET', '/api/admin/logs'],
    ['POST', '/api/admin/logs'],
    ['GET', '/api/admin/users'],
  ] as const)('%s %s → 401', async (method, url) => {
    await expectRefused(app, { method, url, ...(method === 'POST' ? { payload: { level: 'info', message: 'x' } } : {}) });
  });
});

describe('GET /api/admin/health', () => {
  it('reports database, auth and e-mail', async () => {
    const response = await app.inject({ method: 'GET', url: '/api/admin/health', headers: admin });
    expect(response.statusCode).toBe(200);
    const { success, data } = response.json();
    expect(success).toBe(true);
    expect(data).toMatchObject({
      status: 'ok',
      version: '0.1.0',
      database: { status: 'up' },
      auth: { status: 'not_configured', latencyMs: null },
      email: { status: 'not_configured', provider: null },
      // No REDIS_URL: counted in this process, by choice.
      rateLimitStore: { status: 'not_configured', latencyMs: null },
    });
    expect(data.database.latencyMs).toBeGreaterThan(0);
    expect(Number.isInteger(data.email.pendingOutbox)).toBe(true);
    expect(data.uptime).toBeGreaterThanOrEqual(0);
    expect(new Date(data.timestamp).toISOString()).toBe(data.timestamp);
  });

  it("reports the rate-limit store: Redis up, or down (still 200: each instance counts alone meanwhile, and the operator sees it)", async () => {
    for (const [redisUrl, status] of [['redis://127.0.0.1:6379', 'up'], ['redis://127.0.0.1:1', 'down']] as const) {
      const withRedis = await buildTestApp({ REDIS_URL: redisUrl });
      try {
        const response = await withRedis.inject({ method: 'GET', url: '/api/admin/health', headers: admin });
        expect(response.statusCode, redisUrl).toBe(200);
        const { data } = response.json();
        expect(data.status).toBe('ok');
        expect(data.rateLimitStore.status, redisUrl).toBe(status);
        if (status === 'up') expect(data.rateLimitStore.latencyMs).toBeGreaterThan(0);
        else expect(data.rateLimitStore.latencyMs).toBeNull();
      } finally {
        await withRedis.close();
      }
    }
  });

  it('answers 503 when a configured auth server does not answer', async () => {
    const unreachable = await buildTestApp({ SUPABASE_URL: 'http://127.0.0.1:9', SMTP_URL: 'smtp://127.0.0.1:2525' });
    try {
      const response = await unreachable.inject({ method: 'GET', url: '/api/admin/health', headers: admin });
      expect(response.statusCode).toBe(503);
      const body = response.json();
      expect(body).toMatchObject({ success: false, error: 'Service unavailable', statusCode: 503 });
      expect(body.data).toMatchObject({ status: 'error', database: { status: 'up' }, auth: { status: 'down' }, email: { provider: 'smtp', status: 'up' } });
    } finally {
      await unreachable.close();
    }
  });
});

describe('logs', () => {
  const get = async (query: string) => {
    const response = await app.inject({ method: 'GET', url: `/api/admin/logs?${query}`, headers: admin });
    expect(response.statusCode).toBe(200);
    return response.json();
  };

  it('stores a client entry and lists it newest first', async () => {
    const marker = `client-${crypto.randomUUID()}`;
    for (const [level, message] of [['info', `${marker} first`], ['error', `${marker} second`]]) {
      const response = await app.inject({
        method: 'POST',
        url: '/api/admin/logs',
        headers: admin,
        payload: { level, message, context: { page: '/contact', marker } },
      });
      expect(response.statusCode).toBe(201);
      expect(response.json()).toMatchObject({ success: true, message: 'Log entry stored', data: { id: expect.any(String) } });
    }
    const rows = await sql`select level::text, source::text, context, user_id from public.app_logs where context ->> 'marker' = ${marker} order by id`;
    expect(rows.map((r) => [r.level, r.source, r.user_id])).toEqual([
      ['info', 'client', null],
      ['error', 'client', null],
    ]);

    const listed = await get('source=client&limit=500');
    const mine = listed.data.filter((e: { message: string }) => e.message.startsWith(marker));
    expect(mine.map((e: { message: string }) => e.message)).toEqual([`${marker} second`, `${marker} first`]);
    expect(mine[0]).toMatchObject({ level: 'error', source: 'client', context: { page: '/contact', marker }, requestId: expect.any(String) });
    const errorsOnly = await get('level=error&source=client&limit=500');
    expect(errorsOnly.data.every((e: { level: string }) => e.level === 'error')).toBe(true);
    expect(errorsOnly.data.some((e: { message: string }) => e.message === `${marker} first`)).toBe(false);
  });

  it('refuses an invalid entry or filter with 400 and details', async () => {
    const bad = await app.inject({ method: 'POST', url: '/api/admin/logs', headers: admin, payload: { level: 'fatal', message: '' } });
    expect(bad.statusCode).toBe(400);
    expect(bad.json()).toMatchObject({ success: false, error: 'Validation failed', details: { level: expect.any(Array), message: expect.any(Array) } });
    const filter = await app.inject({ method: 'GET', url: '/api/admin/logs?level=verbose&limit=0', headers: admin });
    expect(filter.statusCode).toBe(400);
    expect(Object.keys(filter.json().details).sort()).toEqual(['level', 'limit']);
  });

  it('says what is wrong once per field, in its own words', async () => {
    const notText = await app.inject({ method: 'POST', url: '/api/admin/logs', headers: admin, payload: { level: 'info', message: 42 } });
    expect(notText.json()).toMatchObject({ error: 'Validation failed', details: { message: ['Message must be a string'] } });
    const filter = await app.inject({ method: 'GET', url: '/api/admin/logs?source=bogus&limit=100000000000000000000000', headers: admin });
    expect(filter.statusCode).toBe(400);
    expect(filter.json().details).toEqual({ source: ['Source must be one of: server, client'], limit: ['Limit must be an integer from 1 to 500'] });
  });

  it('refuses a context it could not store as sent: a number too large, NUL, an unpaired surrogate', async () => {
    for (const [raw, detail] of [
      ['{"a":1e400}', 'Context must not contain numbers too large to store (such as 1e400)'],
      // These two the body parser refuses in any body, before the schema.
      ['{"a":"nul \\u0000 here"}', 'Must not contain NUL (\\u0000) characters'],
      ['{"a":"half \\ud800 a pair"}', 'Must not contain unpaired surrogates (\\ud800-\\udfff)'],
    ]) {
      const refused = await app.inject({
        method: 'POST',
        url: '/api/admin/logs',
        headers: { ...admin, 'content-type': 'application/json' },
        payload: `{"level":"info","message":"unstorable","context":${raw}}`,
      });
      expect([refused.statusCode, refused.json().details], raw).toEqual([400, { context: [detail] }]);
    }
  });

  it('persists server entries at warn and above, with the request id, off the request path', async () => {
    const requestId = `log-test-${crypto.randomUUID()}`;
    // A refused request is not stored on its own: refusals are stored as counts
    // per route, status and minute (tests/log-flooding.test.ts).
    const refused = await app.inject({ method: 'GET', url: '/api/admin/users', headers: { 'x-request-id': requestId } });
    expect(refused.statusCode).toBe(401);
    const marker = crypto.randomUUID();
    // As request.log does: a child logger carrying the request id.
    app.log.child({ requestId }).warn({ marker, statusCode: 401 }, 'something refused');
    app.log.error({ marker, detail: { nested: true } }, 'something broke');
    app.log.info({ marker }, 'routine, not stored');

    await app.appLogs.flush();
    const stored = await sql`
      select level::text, message, source::text, request_id, context from public.app_logs
       where request_id = ${requestId} or context ->> 'marker' = ${marker} order by id`;
    expect(stored.map((r) => [r.level, r.message, r.source])).toEqual([
      ['warn', 'something refused', 'server'],
      ['error', 'something broke', 'server'],
    ]);
    expect(stored[0].request_id).toBe(requestId);
    expect(stored[0].context).toMatchObject({ statusCode: 401, marker });
    expect(stored[1].context).toMatchObject({ marker, detail: { nested: true } });

    const since = new Date(Date.now() - 60_000).toISOString();
    const listed = await get(`level=warn&source=server&since=${encodeURIComponent(since)}&limit=500`);
    expect(listed.data.some((e: { requestId: string }) => e.requestId === requestId)).toBe(true);
    const future = await get(`since=${encodeURIComponent(new Date(Date.now() + 3_600_000).toISOString())}`);
    expect(future).toMatchObject({ data: [], pagination: { total: 0, limit: 50, offset: 0 } });
  });

  it('since: a date-time Postgres cannot hold is 400 with details, not a 500; any offset is applied first', async () => {
    for (const since of ['0000-01-01T00:00:00Z', '9999-12-31T23:59:59-23:59']) {
      const response = await app.inject({ method: 'GET', url: `/api/admin/logs?since=${encodeURIComponent(since)}`, headers: admin });
      expect(response.statusCode, since).toBe(400);
      expect(response.json()).toMatchObject({ error: 'Validation failed', details: { since: ['Since must be a date-time from year 1 to 9999'] } });
    }
    // Postgres refuses an offset beyond ±15:59; as an instant it is just a time.
    expect((await get(`since=${encodeURIComponent('2026-01-01T00:00:00+23:59')}`)).success).toBe(true);
  });

  it('pages with limit and offset', async () => {
    const marker = `page-${crypto.randomUUID()}`;
    for (let i = 0; i < 3; i += 1) {
      await app.inject({ method: 'POST', url: '/api/admin/logs', headers: admin, payload: { level: 'debug', message: `${marker} ${i}` } });
    }
    const since = (await sql`select min(created_at) as at from public.app_logs where message like ${`${marker}%`}`)[0].at.toISOString();
    const page = await get(`level=debug&since=${encodeURIComponent(since)}&limit=2&offset=1`);
    expect(page.pagination).toMatchObject({ limit: 2, offset: 1 });
    expect(page.pagination.total).toBeGreaterThanOrEqual(3);
    expect(page.data).toHaveLength(2);
  });

  it('prunes entries older than LOG_RETENTION_DAYS', async () => {
    const marker = crypto.randomUUID();
    await sql`
      insert into public.app_logs (level, message, context, source, created_at) values
        ('warn', 'old', ${sql.json({ marker })}, 'server', now() - interval '31 days'),
        ('warn', 'recent', ${sql.json({ marker })}, 'server', now() - interval '29 days')`;
    expect(await app.appLogs.prune()).toBeGreaterThanOrEqual(1);
    const left = await sql`select message from public.app_logs where context ->> 'marker' = ${marker}`;
    expect(left.map((r) => r.message)).toEqual(['recent']);
  });

  it('prunes once soon after start: an instance restarted more often than hourly still prunes', async () => {
    const marker = crypto.randomUUID();
    await sql`
      insert into public.app_logs (level, message, context, source, created_at)
      values ('warn', 'old', ${sql.json({ marker })}, 'server', now() - interval '31 days')`;
    // The logs plugin on its own, with a first run 50 ms after start instead of a minute.
    const config = testConfig();
    const started = Fastify();
    await started.register(dbPlugin, { config });
    await started.register(metricsPlugin, { config });
    await started.register(appLogsPlugin, { config, firstPruneAfterMs: 50 });
    await started.ready();
    try {
      await waitFor(async () => (await sql`select 1 from public.app_logs where context ->> 'marker' = ${marker}`).length === 0, 3_000, 'the first prune');
    } finally {
      await started.close();
    }
  });

  it('stores what is still queued when the app closes', async () => {
    const closing = await buildTestApp();
    const marker = crypto.randomUUID();
    closing.log.warn({ marker }, 'logged just before close');
    await closing.close();
    const [row] = await sql`select message from public.app_logs where context ->> 'marker' = ${marker}`;
    expect(row?.message).toBe('logged just before close');
  });
});

describe('log sink', () => {
  it('queues without blocking and drops, counting, when full', () => {
    const sink = new LogSink(2);
    for (let i = 0; i < 5; i += 1) sink.write(JSON.stringify({ level: 40, time: 0, msg: `m${i}` }));
    expect(sink.queued).toBe(2);
    expect(sink.dropped).toBe(3);
    expect(sink.take(10).map((e) => e.message)).toEqual(['m0', 'm1']);
    expect(sink.queued).toBe(0);
  });

  it('turns pino lines into entries and skips its own failure lines', () => {
    const line = { level: 60, time: 1_700_000_000_000, pid: 1, hostname: 'h', requestId: 'r1', msg: 'fatal thing', route: '/x' };
    expect(parseLine(JSON.stringify(line))).toEqual({
      level: 'error',
      message: 'fatal thing',
      context: { route: '/x' },
      requestId: 'r1',
      createdAt: '2023-11-14T22:13:20.000Z',
    });
    expect(parseLine(JSON.stringify({ level: 50, err: { message: 'from err' } }))?.message).toBe('from err');
    expect(parseLine(JSON.stringify({ level: 50, msg: 'x', persist: false }))).toBeUndefined();
    expect(parseLine('not json')).toBeUndefined();
    expect(parseLine(JSON.stringify({ level: 40, msg: 'big', blob: 'x'.repeat(20_000) }))?.context).toMatchObject({ truncated: true });
  });

  it('stores what jsonb would refuse: a long context cut inside an emoji, an unpaired surrogate, a NUL', async () => {
    const marker = crypto.randomUUID();
    // 15,999 characters of JSON before the emoji, so the cut at 16,000 falls between its two halves.
    const prefix = JSON.stringify({ marker, blob: '' }).length - 2;
    const lines = [
      { level: 40, msg: 'emoji cut', marker, blob: `${'x'.repeat(15_999 - prefix)}😀${'y'.repeat(100)}` },
      { level: 40, msg: 'lone surrogate \ud800 in the message', marker, value: 'a\udc00b' },
      { level: 40, msg: 'nul', marker, value: 'a\u0000b' },
    ].map((line) => parseLine(JSON.stringify(line))!);
    expect(lines[0].context).toMatchObject({ truncated: true, preview: expect.stringMatching(/x\ufffd$/) });
    expect(lines[1].context).toMatchObject({ truncated: false });
    // The one batch is stored whole (before, jsonb refused it, and every entry in it was lost).
    await insertServerLogEntriesElevated(sql, lines);
    const stored = await sql`select message from public.app_logs where message in ('emoji cut', 'nul') or message like 'lone surrogate%' order by message`;
    expect(stored.map((row) => row.message)).toEqual(['emoji cut', 'lone surrogate \ufffd in the message', 'nul']);
  });
});

describe('app_logs row-level security', () => {
  it('lets admins read entries and store client entries in their own name only', async () => {
    const member = await createAuthUser(sql);
    const boss = await createAuthUser(sql);
    await grantRole(sql, boss.id, 'admin');
    const marker = crypto.randomUUID();
    await sql`insert into public.app_logs (level, message, context, source) values ('warn', 'rls', ${sql.json({ marker })}, 'server')`;
    const visible = (userId: string) =>
      asUser(sql, userId, async (tx) => (await tx`select count(*)::int as n from public.app_logs where context ->> 'marker' = ${marker}`)[0].n);
    expect(await visible(member.id)).toBe(0);
    expect(await visible(boss.id)).toBe(1);
    expect(await asUser(sql, null, async (tx) => tx`select 1 from public.app_logs limit 1`).catch((e) => e.code)).toBe('42501');

    const insertAs = (userId: string, owner: string, source = 'client') =>
      asUser(sql, userId, (tx) => tx`insert into public.app_logs (level, message, source, user_id) values ('info', 'x', ${source}::public.log_source, ${owner})`)
        .then(() => 'stored')
        .catch((error) => error.code);
    expect(await insertAs(boss.id, boss.id)).toBe('stored');
    expect(await insertAs(boss.id, member.id)).toBe('42501');
    expect(await insertAs(boss.id, boss.id, 'server')).toBe('42501');
    expect(await insertAs(member.id, member.id)).toBe('42501');
  });
});

// Whole-table facts (ids, ties, the planner's choice) need a table of their own.
describe('logs on a database of their own', () => {
  let database: { url: string; drop(): Promise<void> };
  let own: postgres.Sql;
  let ownApp: FastifyInstance;
  beforeAll(async () => {
    database = await createPrivateDatabase('adminlogs');
    own = postgres(database.url, { max: 2, onnotice: () => {} });
    ownApp = await buildTestApp({ DATABASE_URL: database.url });
  });
  afterAll(async () => {
    await ownApp?.close();
    await own?.end();
    await database?.drop();
  });

  it('orders entries with the same created_at by their numeric id, and every page has the total', async () => {
    // A day ahead, apart from the app's own entries; ids far above the
    // sequence's. Ids 999999995–1000000005 share one created_at: as text,
    // '999999999' sorts before '1000000005'.
    const [{ at }] = await own<{ at: Date }[]>`select date_trunc('second', now()) + interval '1 day' as at`;
    await own`
      insert into public.app_logs (id, level, message, source, created_at) overriding system value
      select g, 'info'::public.log_level, 'tie ' || g, 'client'::public.log_source, ${at}::timestamptz from generate_series(999999995, 1000000005) g
      union all
      select 999999994, 'info', 'newest', 'client', ${at}::timestamptz + interval '1 second'`;
    const page = async (query: string) => {
      const response = await ownApp.inject({ method: 'GET', url: `/api/admin/logs?since=${encodeURIComponent(at.toISOString())}&${query}`, headers: admin });
      expect(response.statusCode).toBe(200);
      const { data, pagination } = response.json();
      return { ids: data.map((e: { id: string }) => e.id), pagination };
    };
    const ids = (...offsets: number[]) => offsets.map((n) => String(1_000_000_000 + n));
    expect(await page('limit=4&offset=0')).toEqual({ ids: ids(-6, 5, 4, 3), pagination: { total: 12, limit: 4, offset: 0 } });
    expect(await page('limit=4&offset=4')).toEqual({ ids: ids(2, 1, 0, -1), pagination: { total: 12, limit: 4, offset: 4 } });
    expect(await page('limit=4&offset=8')).toEqual({ ids: ids(-2, -3, -4, -5), pagination: { total: 12, limit: 4, offset: 8 } });
    expect(await page('limit=4&offset=12')).toEqual({ ids: [], pagination: { total: 12, limit: 4, offset: 12 } });
    // Each filter counts what it lists.
    expect((await page('level=info&source=client&limit=2')).pagination.total).toBe(12);
    expect(await page('level=error')).toEqual({ ids: [], pagination: { total: 0, limit: 50, offset: 0 } });
  });

  it('finds an account\'s entries through an index, so deleting the account does not read the whole table', async () => {
    const user = await createAuthUser(own);
    await own`
      insert into public.app_logs (level, message, source)
      select 'warn', 'a server entry', 'server' from generate_series(1, 50000)`;
    await own`insert into public.app_logs (level, message, source, user_id) select 'info', 'a client entry', 'client', ${user.id} from generate_series(1, 3)`;
    await own`analyze public.app_logs`;
    // What the foreign key (on delete set null) runs for each deleted account.
    const plan = await own.begin(async (tx) => {
      const rows = await tx.unsafe(`explain update only public.app_logs set user_id = null where '${user.id}'::uuid = user_id`);
      return rows.map((row) => row['QUERY PLAN']).join('\n');
    });
    expect(plan).toContain('app_logs_user_id_idx');

    await own`delete from auth.users where id = ${user.id}`;
    const [{ orphaned }] = await own`select count(*)::int as orphaned from public.app_logs where message = 'a client entry' and user_id is null`;
    expect(orphaned).toBe(3);
  });
});

describe('POST /admin/status/session (the dashboard sign-in)', () => {
  it('names a missing or empty field the way the auth routes do', async () => {
    const noPassword = await app.inject({ method: 'POST', url: '/admin/status/session', payload: { email: 'x' } });
    expect(noPassword.statusCode).toBe(400);
    expect(noPassword.json().details).toEqual({ password: ['Password is required'] });
    const empty = await app.inject({ method: 'POST', url: '/admin/status/session', payload: { email: ' ', password: 42 } });
    expect(empty.json().details).toEqual({ email: ['Email is required'], password: ['Password must be a string'] });
  });
});

describe('GET /api/admin/users', () => {
  it('lists profiles with their roles, searchable and paginated', async () => {
    const tag = crypto.randomUUID().slice(0, 8);
    const first = await createAuthUser(sql, { email: uniqueEmail(`list-${tag}`), name: 'Ada Listed' });
    const second = await createAuthUser(sql, { email: uniqueEmail(`list-${tag}`), name: 'Grace Listed' });
    await grantRole(sql, second.id, 'editor');
    await grantRole(sql, second.id, 'viewer');

    const response = await app.inject({ method: 'GET', url: `/api/admin/users?search=list-${tag}`, headers: admin });
    expect(response.statusCode).toBe(200);
    const body = response.json();
    expect(body.pagination).toEqual({ total: 2, limit: 20, offset: 0 });
    expect(body.data).toEqual([
      { id: second.id, email: second.email, name: 'Grace Listed', createdAt: expect.any(String), lastLogin: null, roles: ['editor', 'viewer'] },
      { id: first.id, email: first.email, name: 'Ada Listed', createdAt: expect.any(String), lastLogin: null, roles: [] },
    ]);

    const page = await app.inject({ method: 'GET', url: `/api/admin/users?search=list-${tag}&limit=1&offset=1`, headers: admin });
    expect(page.json().data.map((u: { id: string }) => u.id)).toEqual([first.id]);
    expect(page.json().pagination.total).toBe(2);
    // Wildcards in the search are literal.
    const literal = await app.inject({ method: 'GET', url: `/api/admin/users?search=${encodeURIComponent('%_')}`, headers: admin });
    expect(literal.json().data.every((u: { email: string; name: string }) => `${u.email}${u.name}`.includes('%_'))).toBe(true);
    // A NUL cannot be in any name or address: said so per field, like every other bad query.
    const nul = await app.inject({ method: 'GET', url: '/api/admin/users?search=a%00b', headers: admin });
    expect(nul.statusCode).toBe(400);
    expect(nul.json()).toMatchObject({ error: 'Validation failed', details: { search: ['Search must not contain NUL characters or unpaired surrogates'] } });
    const long = await app.inject({ method: 'GET', url: `/api/admin/users?search=${'s'.repeat(201)}`, headers: admin });
    expect(long.json()).toMatchObject({ error: 'Validation failed', details: { search: ['Search must be at most 200 characters'] } });
  });
});
