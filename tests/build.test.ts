import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { build, SERVICE_ENTRIES } from '../scripts/build.ts';
import { loadTrackerScript } from '../src/modules/analytics/tracker/routes.ts';
import { preloadOf, TRICKY_DOT_ENV, TRICKY_EXPECTED, TRICKY_NAMES, variablesSeen } from './support/dot-env.ts';
import { startServerProcess } from './support/fault-traffic.ts';

// npm run build, then npm start: the service compiled to JavaScript, with the
// files its routes read at run time beside it, starts and serves as the
// TypeScript sources do, and stops cleanly. (The build goes inside the repo,
// as dist/ does, so that the compiled files find node_modules.)

const ROOT = path.resolve(import.meta.dirname, '..');
const OUT = path.join(ROOT, `.cache/build-test-${process.pid}`);

beforeAll(async () => {
  await build(OUT, SERVICE_ENTRIES);
}, 120_000);
afterAll(async () => {
  await rm(OUT, { recursive: true, force: true });
});

describe('the compiled service', () => {
  it('holds JavaScript only, plus the dashboard and tracker files copied from src', async () => {
    const server = await readFile(path.join(OUT, 'src/server.js'), 'utf8');
    expect(server).toMatch(/from ["']\.\/app\.js["']/);
    for (const asset of ['src/modules/admin/status/index.html', 'src/modules/admin/status/app.js', 'src/modules/analytics/tracker/tracker.js']) {
      expect(await readFile(path.join(OUT, asset), 'utf8'), asset).toBe(await readFile(path.join(ROOT, asset), 'utf8'));
    }
  });

  it('starts, answers /health, the dashboard and the tracker, and exits 0 on SIGTERM', async () => {
    const server = await startServerProcess(inject('stack').databaseUrl, {}, path.join(OUT, 'src/server.js'));
    const base = server.baseUrl;
    try {
      const health = await fetch(`${base}/health`);
      expect(health.status).toBe(200);
      const signIn = await fetch(`${base}/admin/status`);
      expect(signIn.status).toBe(401);
      expect(await signIn.text()).toContain('<form');
      const asset = await fetch(`${base}/admin/status/assets/app.js`);
      expect(asset.status).toBe(200);
      expect(asset.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
      const tracker = await fetch(`${base}/script.js`);
      expect(tracker.status).toBe(200);
      expect(await tracker.text()).toBe((await loadTrackerScript()).text);
    } finally {
      await server.stop();
    }
    expect(server.ended(), server.output()).toBe('exited with code 0');
  });

  it('reads .env through the compiled reader npm start preloads, each line as written', async () => {
    const preload = await preloadOf('start');
    expect(preload).toMatch(/^\.\/dist\//);
    const compiled = path.join(OUT, path.relative('dist', preload));
    const result = await variablesSeen(compiled, TRICKY_DOT_ENV, TRICKY_NAMES, { GIVEN: 'from the environment' });
    expect(result).toEqual({ code: 0, seen: TRICKY_EXPECTED, printed: '' });
  });
});
