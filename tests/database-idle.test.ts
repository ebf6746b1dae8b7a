import { setTimeout as sleep } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config.ts';
import { buildTestApp } from './support/app.ts';
import { testSql } from './support/db.ts';

// How long the pool keeps an idle connection (DATABASE_IDLE_TIMEOUT_S). A new
// connection costs the request that opens it the connecting and each
// statement's and trigger's first run on it (docs/performance.md, "After a
// quiet spell"), so the pool keeps its connections through a quiet spell, and
// a smaller setting is the one that applies.

const admin = testSql();
const apps: FastifyInstance[] = [];
afterAll(async () => {
  await Promise.all(apps.map((app) => app.close()));
  await admin.end();
});

/** The backend that serves the app's next elevated query (a pool of one: always the same connection while it is open). */
async function backendOf(app: FastifyInstance): Promise<number> {
  const [{ pid }] = await app.db.sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  return pid;
}

async function isOpen(pid: number): Promise<boolean> {
  const [{ open }] = await admin<{ open: boolean }[]>`select exists (select 1 from pg_stat_activity where pid = ${pid}) as open`;
  return open;
}

describe('idle pooled connections', () => {
  it('are kept 600 s unless set otherwise', () => {
    expect(parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://a@127.0.0.1:5432/b' }).DATABASE_IDLE_TIMEOUT_S).toBe(600);
  });

  it('are closed after DATABASE_IDLE_TIMEOUT_S, and the next query opens a new one', async () => {
    const app = await buildTestApp({ DATABASE_POOL_MAX: '1', DATABASE_IDLE_TIMEOUT_S: '1' });
    apps.push(app);
    const first = await backendOf(app);
    expect(await isOpen(first)).toBe(true);
    await sleep(2_500);
    expect(await isOpen(first)).toBe(false);
    expect(await backendOf(app)).not.toBe(first);
  });

  it('stay open through a pause shorter than the setting', async () => {
    const app = await buildTestApp({ DATABASE_POOL_MAX: '1', DATABASE_IDLE_TIMEOUT_S: '5' });
    apps.push(app);
    const first = await backendOf(app);
    await sleep(2_500);
    expect(await isOpen(first)).toBe(true);
    expect(await backendOf(app)).toBe(first);
  });
});
