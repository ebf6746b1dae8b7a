import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { feedbackBody, waitFor } from './support/feedback-fixtures.ts';
import { expectRunning, type ServerProcess, startServerProcess } from './support/fault-traffic.ts';
import { createPrivateDatabase } from './support/private-database.ts';
import { type ResendStandIn, startResendStandIn } from './support/resend-stand-in.ts';

// Two server processes (`node src/server.ts`) on two ports, sharing one
// Postgres database and one Redis: the rate-limit budget is shared, each
// notification e-mail is sent once, and ingestion through both loses nothing.
// (A session signed out on one instance and refused on another is in
// tests/auth-flows.test.ts, with the real auth server.)

let database: { url: string; drop(): Promise<void> };
let sql: postgres.Sql;
let resend: ResendStandIn;
let servers: ServerProcess[] = [];

beforeAll(async () => {
  database = await createPrivateDatabase('two_instances');
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
  resend = await startResendStandIn();
  resend.latencyMs = 20; // sends overlap, so the two workers really race
  const shared = {
    REDIS_URL: 'redis://127.0.0.1:6379',
    RATE_LIMIT_REDIS_PREFIX: `two-instances-${randomBytes(6).toString('hex')}:`,
    RATE_LIMIT_AUTH_PER_MIN: '10',
    RESEND_API_KEY: 're_test_key',
    RESEND_BASE_URL: resend.url,
    FEEDBACK_NOTIFY_EMAILS: 'triage@example.test',
    FEEDBACK_OUTBOX_WORKER: 'true',
    FEEDBACK_OUTBOX_POLL_MS: '25',
  };
  servers = await Promise.all([startServerProcess(database.url, shared), startServerProcess(database.url, shared)]);
}, 60_000);

afterAll(async () => {
  await Promise.all(servers.map((server) => server.stop()));
  await resend?.stop();
  await sql?.end();
  await database?.drop();
});

const post = (server: ServerProcess, path: string, body: unknown) =>
  fetch(`${server.baseUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });

describe('two instances sharing Postgres and Redis', () => {
  it('share one sign-in budget: the 11th sign-in across both is refused', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 11; i += 1) {
      // Missing fields: 400 from the route, but every attempt counts.
      const response = await post(servers[i % 2], i % 3 === 0 ? '/api/auth/signup' : '/api/auth/signin', {});
      codes.push(response.status);
    }
    expect(codes.slice(0, 10)).toEqual(Array(10).fill(400));
    expect(codes[10]).toBe(429);
    // Both instances refuse now.
    expect((await post(servers[0], '/api/auth/signin', {})).status).toBe(429);
    expect((await post(servers[1], '/api/auth/signin', {})).status).toBe(429);
  });

  it('send each notification e-mail exactly once, whichever worker claims it', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 20; i += 1) {
      const response = await post(servers[i % 2], '/api/feedback', feedbackBody({ comment: `Two instances, submission ${i} of 20.` }));
      expect(response.status).toBe(201);
      ids.push(((await response.json()) as { data: { id: string } }).data.id);
    }
    await waitFor(() => ids.every((id) => resend.sentAbout(id).length > 0), 20_000, 'every notification sent');
    // Give a duplicate the time to happen, if it were going to.
    await new Promise((resolve) => setTimeout(resolve, 500));
    for (const id of ids) expect(resend.sentAbout(id), id).toHaveLength(1);
    const [{ unsent }] = await sql`select count(*)::int as unsent from public.feedback_outbox where sent_at is null`;
    expect(unsent).toBe(0);
  });

  it('lose no acknowledged analytics event when ingesting through both', async () => {
    const [{ id: websiteId }] = await sql`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('Two instances', 'two.example', ${randomBytes(32)}, 'two') returning id`;
    const answers = await Promise.all(
      Array.from({ length: 400 }, (_, i) =>
        post(servers[i % 2], '/api/analytics', {
          websiteId,
          eventType: 'page_view',
          page: `/page-${i % 7}`,
          userAgent: 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36',
          sessionId: `session-${i % 40}`,
        }).then(async (response) => ({ status: response.status, body: (await response.json()) as { data?: { id: string } } })),
      ),
    );
    const acknowledged = answers.flatMap((answer) => (answer.status === 201 && answer.body.data ? [answer.body.data.id] : []));
    expect(acknowledged).toHaveLength(400);
    const [{ stored }] = await sql`select count(*)::int as stored from public.analytics_events where id = any(${acknowledged}::uuid[])`;
    expect(stored).toBe(400);
    const [{ total }] = await sql`select coalesce(sum(page_views), 0)::int as total from public.analytics_daily_totals where website_id = ${websiteId}`;
    expect(total).toBe(400);
    for (const server of servers) expectRunning(server);
  });
});
