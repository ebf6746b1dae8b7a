import { spawn } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

// `npm start` runs what `npm run build` wrote to dist/. Before a build it says
// so in one line (package.json's prestart), not with Node's ERR_MODULE_NOT_FOUND
// and its stack. Run in a directory holding only a copy of package.json: the
// check needs nothing else, and a real build is not needed to tell the cases apart.

const ROOT = path.resolve(import.meta.dirname, '..');
const dirs: string[] = [];
afterEach(async () => {
  for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
});

async function projectCopy(): Promise<string> {
  const dir = await mkdtemp(path.join(tmpdir(), 'npm-start-'));
  dirs.push(dir);
  await copyFile(path.join(ROOT, 'package.json'), path.join(dir, 'package.json'));
  return dir;
}

function npmStart(cwd: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn('npm', ['start'], {
    cwd,
    env: { PATH: `${path.join(ROOT, 'node_modules/.bin')}:${process.env.PATH ?? ''}`, HOME: process.env.HOME ?? '' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
}

describe('npm start before npm run build', () => {
  it('refuses in one line saying to build, exit code 1, and does not run the server', { timeout: 20_000 }, async () => {
    const { code, stdout, stderr } = await npmStart(await projectCopy());
    expect(code, stderr).toBe(1);
    expect(stderr.trim().split('\n')).toContain('npm start: dist/ is missing: run npm run build first');
    expect(stderr).not.toContain('ERR_MODULE_NOT_FOUND');
    expect(stdout).not.toContain('> portfolio-backend@0.1.0 start');
  });

  it('with the built files there, the start runs', { timeout: 20_000 }, async () => {
    const dir = await projectCopy();
    // Empty modules: the server's own start is tested on a real build (build.test.ts).
    for (const file of ['dist/src/server.js', 'dist/scripts/env-file.js']) {
      await mkdir(path.dirname(path.join(dir, file)), { recursive: true });
      await writeFile(path.join(dir, file), '');
    }
    const { code, stdout, stderr } = await npmStart(dir);
    expect(code, stderr).toBe(0);
    expect(stdout).toContain('> portfolio-backend@0.1.0 start');
    expect(stderr).not.toContain('dist/ is missing');
  });
});
