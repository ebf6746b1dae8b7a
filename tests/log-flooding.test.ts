import { once } from 'node:events';
import { type AddressInfo, connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../src/app.ts';
import { testConfig } from './support/app.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// A flood of refused requests must not push real errors out of app_logs:
// refusals (4xx) are stored as counts per route, status and minute, never
// one row per request, and a 429 is not stored twice.

const database = usePrivateDatabase('logflood');

interface StoredRow {
  level: string;
  message: string;
  context: { route?: string; statusCode?: number; count?: number; minute?: string };
}

describe('stored logs under a flood of refusals', () => {
  it('450 refused requests become a handful of rows whose counts add up', async () => {
    const app = await buildApp({ config: testConfig({ DATABASE_URL: database.url, RATE_LIMIT_GENERAL_PER_15MIN: '100' }) });
    try {
      for (let i = 0; i < 250; i += 1) await app.inject({ method: 'GET', url: '/api/users/me', remoteAddress: '198.51.100.71' });
      for (let i = 0; i < 150; i += 1) {
        await app.inject({ method: 'GET', url: `/api/scan-${i}/wp-login.php`, remoteAddress: `198.51.100.${100 + (i % 2)}` });
      }
      for (let i = 0; i < 50; i += 1) {
        await app.inject({ method: 'POST', url: '/api/feedback', payload: { name: 'x' }, remoteAddress: '198.51.100.72' });
      }
    } finally {
      // Closing stores whatever is still pending.
      await app.close();
    }
    const rows = await database.sql<StoredRow[]>`select level::text, message, context from public.app_logs where source = 'server'`;
    expect(rows.length, JSON.stringify(rows.slice(0, 3))).toBeLessThanOrEqual(12);
    const counted = (route: string, statusCode: number) =>
      rows.filter((row) => row.context.route === route && row.context.statusCode === statusCode).reduce((sum, row) => sum + (row.context.count ?? 0), 0);
    expect(counted('GET /api/users/me', 401)).toBe(100);
    expect(counted('GET /api/users/me', 429)).toBe(150);
    // Unknown URLs share one key, so varying them cannot grow the table either.
    expect(counted('(unknown route)', 404)).toBe(150);
    expect(counted('POST /api/feedback', 400)).toBe(50);
    for (const row of rows.filter((row) => row.context.route !== undefined)) expect(row.message).toBe('requests refused');
    // Nothing else was stored per request.
    expect(rows.filter((row) => row.context.route === undefined).map((row) => row.message)).not.toContain('request refused');
  });
});

describe('a client that hangs up in the middle of its body', () => {
  it('is not stored as a server error (it was a database error, 503, before)', async () => {
    const app = await buildApp({ config: testConfig({ DATABASE_URL: database.url }) });
    try {
      await app.listen({ host: '127.0.0.1', port: 0 });
      const { port } = app.server.address() as AddressInfo;
      for (let i = 0; i < 3; i += 1) {
        const socket = connect(port, '127.0.0.1');
        await once(socket, 'connect');
        socket.write('POST /api/feedback HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"name":');
        await new Promise((resolve) => setTimeout(resolve, 50));
        socket.destroy();
      }
      // The server noticed each hang-up before it closes.
      const openConnections = () => new Promise<number>((resolve, reject) => app.server.getConnections((error, count) => (error ? reject(error) : resolve(count))));
      await expect.poll(openConnections, { timeout: 5_000 }).toBe(0);
    } finally {
      await app.close();
    }
    const errors = await database.sql`select message, context from public.app_logs where source = 'server' and level = 'error'`;
    expect(errors).toEqual([]);
  });
});
