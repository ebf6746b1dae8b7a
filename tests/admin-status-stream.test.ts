import net, { type AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import { MAX_STREAMS_PER_ADMIN } from '../src/modules/admin/status/stream.ts';
import { testConfig, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/app.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { createAuthUser, grantRole, openSession } from './support/db.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { floodingDashboardApp } from './support/flooding-dashboard.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// The dashboard's event stream outlives the check made when it opened: it
// re-checks its admin's session and role, so a signed-out or demoted admin's
// stream ends, and one admin holds at most a few streams.
//
// auth.sessions belongs to the auth server; this file's own database gets the
// table in the shape the auth server gives it (openSession), so sessions can be
// opened and ended the way the auth server does.

const encoder = new TextEncoder();
const RECHECK_MS = 200;
let database: { url: string; drop(): Promise<void> };
let sql: postgres.Sql;
let app: FastifyInstance;
let base: string;

beforeAll(async () => {
  database = await createPrivateDatabase('streams');
  sql = postgres(database.url, { max: 2, onnotice: () => {} });
  app = await buildApp({ config: testConfig({ DATABASE_URL: database.url, ADMIN_STREAM_RECHECK_MS: String(RECHECK_MS) }) });
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  base = address.startsWith('http') ? address : `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  // fetch (undici) opens connections after the aborted streams above and sends
  // nothing on them; the server would wait out its headers timeout (about a
  // minute) for them before it closes.
  app?.server.closeAllConnections();
  await app?.close();
  await sql?.end();
  await database?.drop();
});

async function adminSession(): Promise<{ userId: string; sessionId: string; authorization: string }> {
  const user = await createAuthUser(sql);
  await grantRole(sql, user.id, 'admin');
  const sessionId = await openSession(sql, user.id);
  const token = await new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: sessionId, email: user.email })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setSubject(user.id)
    .setIssuedAt()
    .setExpirationTime('1h')
    .sign(encoder.encode(TEST_JWT_SECRET));
  return { userId: user.id, sessionId, authorization: `Bearer ${token}` };
}

interface OpenStream {
  /** Resolves with everything received once the server ends the stream, or 'still open' after `ms`. */
  endedWithin(ms: number): Promise<string>;
  close(): void;
}

async function openStream(authorization: string): Promise<OpenStream> {
  const controller = new AbortController();
  const response = await fetch(`${base}/admin/status/stream`, { headers: { authorization }, signal: controller.signal });
  expect(response.status).toBe(200);
  const reader = response.body!.getReader();
  let text = '';
  const ended = (async () => {
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return text;
        text += Buffer.from(value).toString();
      }
    } catch {
      return 'aborted';
    }
  })();
  return {
    async endedWithin(ms) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still open'), ms)));
      const result = await Promise.race([ended, late]);
      clearTimeout(timer);
      return result;
    },
    close: () => controller.abort(),
  };
}

describe('/admin/status/stream re-checks its admin', () => {
  it('a signed-out admin’s stream ends', async () => {
    const admin = await adminSession();
    const stream = await openStream(admin.authorization);
    try {
      expect(await stream.endedWithin(RECHECK_MS * 3)).toBe('still open');
      await sql`delete from auth.sessions where id = ${admin.sessionId}`;
      const received = await stream.endedWithin(5_000);
      expect(received).toContain('event: end');
      expect(received).toContain('signed out or no longer an admin');
    } finally {
      stream.close();
    }
  });

  it('a demoted admin’s stream ends', async () => {
    await adminSession(); // another admin, so this one may lose the role
    const admin = await adminSession();
    const stream = await openStream(admin.authorization);
    try {
      await sql`delete from public.user_roles where user_id = ${admin.userId} and role = 'admin'`;
      expect(await stream.endedWithin(5_000)).toContain('event: end');
    } finally {
      stream.close();
    }
  });

  it('a legacy admin token’s stream ends when the token expires', async () => {
    const now = Math.floor(Date.now() / 1000);
    const token = await new SignJWT({ admin: true, userId: 'ops-stream' })
      .setProtectedHeader({ alg: 'HS256' })
      .setIssuedAt(now)
      .setExpirationTime(now + 2)
      .sign(encoder.encode(TEST_ADMIN_JWT_SECRET));
    const stream = await openStream(`Bearer ${token}`);
    try {
      // The verifier allows 5 s of clock skew past exp.
      expect(await stream.endedWithin(10_000)).toContain('event: end');
    } finally {
      stream.close();
    }
  });

  it(`one admin holds at most ${MAX_STREAMS_PER_ADMIN} streams; a new one ends the oldest`, async () => {
    const admin = await adminSession();
    const streams: OpenStream[] = [];
    try {
      for (let i = 0; i <= MAX_STREAMS_PER_ADMIN; i += 1) streams.push(await openStream(admin.authorization));
      expect(await streams[0].endedWithin(2_000)).toContain('too many open streams');
      for (const open of streams.slice(1)) expect(await open.endedWithin(300)).toBe('still open');
    } finally {
      for (const open of streams) open.close();
    }
  });
});

describe('/admin/status/stream and a client that leaves while it is authorized', () => {
  it('opens no stream for it: the admin’s open tabs keep their places', async () => {
    const admin = await adminSession();
    // One place short of the limit: the departed client's stream, had it been counted, would take the last.
    const tabs = [];
    for (let tab = 1; tab < MAX_STREAMS_PER_ADMIN; tab += 1) tabs.push(await openStream(admin.authorization));
    // A second session of the same admin, not yet seen alive: its check reads
    // auth.sessions, which a held lock keeps waiting while the client leaves.
    const sessionId = await openSession(sql, admin.userId);
    const token = await new SignJWT({ role: 'authenticated', aud: 'authenticated', session_id: sessionId })
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(admin.userId)
      .setIssuedAt()
      .setExpirationTime('1h')
      .sign(encoder.encode(TEST_JWT_SECRET));
    const locker = postgres(database.url, { max: 1, onnotice: () => {} });
    let releaseLock!: () => void;
    const lockHeld = new Promise<void>((held) =>
      locker
        .begin(async (tx) => {
          await tx`lock table auth.sessions in access exclusive mode`;
          held();
          await new Promise<void>((release) => (releaseLock = release));
        })
        .catch(() => {}),
    );
    const waitingOnLock = async () =>
      (await sql`select count(*)::int as n from pg_stat_activity where wait_event_type = 'Lock' and query like '%session_is_open%'`)[0].n > 0;
    const client = net.connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    try {
      await lockHeld;
      client.write(`GET /admin/status/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n\r\n`);
      await waitFor(waitingOnLock, 5_000, 'the check to wait on the lock');
      client.resetAndDestroy();
      await new Promise((resolve) => setTimeout(resolve, 100));
      releaseLock();
      await waitFor(async () => !(await waitingOnLock()), 5_000, 'the check to end');
      // The last place: with the departed client's stream counted, this tab would push out the first.
      tabs.push(await openStream(admin.authorization));
      for (const tab of tabs) expect(await tab.endedWithin(500)).toBe('still open');
    } finally {
      releaseLock?.();
      client.destroy();
      await locker.end();
      for (const tab of tabs) tab.close();
    }
  });
});

describe('/admin/status/stream and a client that stops reading', () => {
  it('sends no backlog while the client is behind, and closes the stream when it stays behind', async () => {
    const STALLED_LIMIT_MS = 500;
    const BACKLOG_LIMIT = 2 * 1024 * 1024;
    const { app: stalledApp, opened } = await floodingDashboardApp(database.url, STALLED_LIMIT_MS);
    await stalledApp.listen({ host: '127.0.0.1', port: 0 });
    // A client that sends its request and never reads the answer.
    const client = net.connect((stalledApp.server.address() as AddressInfo).port, '127.0.0.1');
    try {
      const { authorization } = await legacyAdmin();
      client.write(`GET /stalled-status/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${authorization}\r\n\r\n`);
      const { stream } = await waitFor(() => opened[0], 5_000, 'the stream');
      // Without a bound, the backlog grows by a snapshot per tick for as long as the client stays.
      const outcome = await waitFor(
        () => {
          if (stream.writableLength + stream.readableLength > BACKLOG_LIMIT) return 'backlog past the limit';
          return stream.destroyed && 'closed';
        },
        15_000,
        'the stalled stream to close',
      );
      expect(outcome).toBe('closed');
      // ...and with it the connection: the server holds nothing for this client any more.
      const connections = () => new Promise<number>((resolve, reject) => stalledApp.server.getConnections((error, count) => (error ? reject(error) : resolve(count))));
      await waitFor(async () => (await connections()) === 0, 2_000, 'the connection to close');
    } finally {
      client.destroy();
      await stalledApp.close();
    }
  });
});
