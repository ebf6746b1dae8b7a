import net, { type AddressInfo } from 'node:net';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import statusRoutes from '../src/modules/admin/status/routes.ts';
import { shutdownBudget } from '../src/lib/shutdown-budget.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { testConfig, TEST_ADMIN_JWT_SECRET } from './support/app.ts';
import { startServerProcess } from './support/fault-traffic.ts';
import { waitFor } from './support/feedback-fixtures.ts';
import { floodingDashboardApp } from './support/flooding-dashboard.ts';
import { usePrivateDatabase } from './support/private-database.ts';
import { storedListRefusals } from './support/db.ts';

// Long responses on close. A download in progress, or a dashboard stream,
// once held server.close() open until the deadline killed the process
// (exit 1): the onClose hooks (analytics drain, log flush, pool) never ran.
// Now streams end at once (destroyed when their client is behind), downloads
// get a share of SHUTDOWN_TIMEOUT_MS and are then cut, visibly incomplete.

const SHUTDOWN_TIMEOUT_MS = 4_000;
/** HTTP/1.1 chunked encoding's last chunk: a download that ends with it looks complete. */
const LAST_CHUNK = '\r\n0\r\n\r\n';

const database = usePrivateDatabase('downloads');

/** Everything `socket` receives from now until the server ends the connection. */
function readToClose(socket: net.Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  return new Promise((resolve) => socket.once('close', () => resolve(Buffer.concat(chunks))));
}

describe('SIGTERM during a download whose client reads slowly', () => {
  it('cuts the download within the budget, runs the final steps, and exits 0', async () => {
    // About 20 MB of CSV: far more than the sockets between server and client buffer.
    await database.sql`
      insert into public.feedback (name, email, comment, rating)
      select 'Bulk ' || g, 'bulk@example.test', repeat('A long comment. ', 1250), 3
        from generate_series(1, 1000) g`;
    const server = await startServerProcess(database.url, {
      SHUTDOWN_TIMEOUT_MS: String(SHUTDOWN_TIMEOUT_MS),
      // Long enough that only the shutdown can end the stalled download.
      EXPORT_STALL_MS: '60000',
    });
    const authorization = `Bearer ${await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops-downloads')}`;
    // A client that sends its request and reads nothing more until the process has ended.
    const client = net.connect(Number(new URL(server.baseUrl).port), '127.0.0.1');
    try {
      client.write(`GET /api/feedback/export HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${authorization}\r\n\r\n`);
      await waitFor(() => client.readableLength > 0, 10_000, 'the download to start');
      // A refused request just before the signal: its log entry is still waiting to be stored.
      expect((await fetch(`${server.baseUrl}/api/feedback/get-feedback`)).status).toBe(401);

      const { exitCode, tookMs: took } = await server.terminate();
      expect(exitCode, server.output()).toBe(0);
      expect(took).toBeLessThan(SHUTDOWN_TIMEOUT_MS);
      // The download had its share of the deadline before it was cut.
      expect(took).toBeGreaterThanOrEqual(shutdownBudget(SHUTDOWN_TIMEOUT_MS).responsesMs);

      // The client gets what was sent before the cut, then the connection's end without the last chunk.
      const received = (await readToClose(client)).toString('latin1');
      expect(received).toMatch(/^HTTP\/1\.1 200 /);
      expect(received.toLowerCase()).toContain('transfer-encoding: chunked');
      expect(received.endsWith(LAST_CHUNK)).toBe(false);
      expect(received.length).toBeLessThan(15 * 1024 * 1024);
    } finally {
      client.destroy();
      await server.stop();
    }
    // The log flush (an onClose step) ran: the refusal reached app_logs before the process ended.
    expect((await storedListRefusals(database.sql)).length).toBeGreaterThan(0);
  });
});

/** Resolves with what `promise` gave, or 'still waiting' after `ms`. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | 'still waiting'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'still waiting'>((resolve) => (timer = setTimeout(() => resolve('still waiting'), ms)));
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

describe('the dashboard stream on close', () => {
  it('a stream whose client stopped reading is destroyed, so the close does not wait for it', async () => {
    // Never cut for being behind, so only the close can end it.
    const { app, opened } = await floodingDashboardApp(database.url, 60_000);
    await app.listen({ host: '127.0.0.1', port: 0 });
    const client = net.connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    let closed: Promise<void> | undefined;
    try {
      const { authorization } = await legacyAdmin();
      client.write(`GET /stalled-status/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${authorization}\r\n\r\n`);
      const { stream, response } = await waitFor(() => opened[0], 5_000, 'the stream');
      await waitFor(() => response.writableNeedDrain && stream.writableNeedDrain, 5_000, 'the client to fall behind');
      closed = app.close();
      expect(await within(closed.then(() => 'closed'), 3_000)).toBe('closed');
      expect(stream.destroyed).toBe(true);
    } finally {
      client.destroy();
      await (closed ?? app.close());
    }
  });

  it('a stream whose request was being authorized when the close began is ended, not left open', async () => {
    const config = testConfig({ DATABASE_URL: database.url });
    let arrived!: () => void;
    const hasArrived = new Promise<void>((resolve) => (arrived = resolve));
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    const app = await buildApp({ config }, {
      extend: async (scope) => {
        // Holds the request before authorize() until the dashboard's preClose (endAll) has run.
        scope.addHook('onRequest', async () => {
          arrived();
          await released;
        });
        await scope.register(statusRoutes, { prefix: '/late-status', config, version: 'test', activeVisitors: async () => ({}) });
        // A sibling registered after the dashboard: its preClose runs after the dashboard's.
        await scope.register(async (after) => after.addHook('preClose', async () => release()));
      },
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const client = net.connect((app.server.address() as AddressInfo).port, '127.0.0.1');
    const received = readToClose(client);
    let closed: Promise<void> | undefined;
    try {
      const { authorization } = await legacyAdmin();
      client.write(`GET /late-status/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: ${authorization}\r\n\r\n`);
      await hasArrived;
      closed = app.close();
      expect(await within(closed.then(() => 'closed'), 4_000)).toBe('closed');
      const text = (await received).toString();
      expect(text).toMatch(/^HTTP\/1\.1 200 /);
      // Ended by the server (the end event, then the last chunk), not cut.
      expect(text).toContain('event: end');
      expect(text.endsWith(LAST_CHUNK)).toBe(true);
    } finally {
      release();
      client.destroy();
      await (closed ?? app.close());
    }
  });
});
