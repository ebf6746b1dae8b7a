import { spawn } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { build } from '../scripts/build.ts';
import { loadTrackerScript } from '../src/modules/analytics/tracker/routes.ts';

// npm run build, then npm start: the service compiled to JavaScript, with the
// files its routes read at run time beside it, starts and serves as the
// TypeScript sources do, and stops cleanly. (The build goes inside the repo,
// as dist/ does, so that the compiled files find node_modules.)

const ROOT = path.resolve(import.meta.dirname, '..');
const OUT = path.join(ROOT, `.cache/build-test-${process.pid}`);

beforeAll(async () => {
  await build(OUT, ['src/server.ts']);
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
    const port = 40_000 + Math.floor(Math.random() * 10_000);
    const child = spawn(process.execPath, [path.join(OUT, 'src/server.js')], {
      env: { PATH: process.env.PATH ?? '', NODE_ENV: 'development', DATABASE_URL: inject('stack').databaseUrl, PORT: String(port), LOG_LEVEL: 'info' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const base = `http://127.0.0.1:${port}`;
    try {
      for (let attempt = 0; ; attempt += 1) {
        try {
          if ((await fetch(`${base}/health`)).ok) break;
        } catch {
          if (attempt > 100) throw new Error(`compiled server did not start:\n${output}`);
          await new Promise((resolve) => setTimeout(resolve, 100));
        }
      }
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
      child.kill('SIGTERM');
    }
    expect(await exited, output).toBe(0);
  });
});
