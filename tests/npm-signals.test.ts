import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { waitFor } from './support/feedback-fixtures.ts';

// A process manager or an IDE's stop button sends SIGTERM to `npm run dev`'s
// own process, not to its group as Ctrl-C does. npm passes it to its child;
// the script runs as that child (`exec`), not under a shell that would die
// and leave the API listening.

const ROOT = path.resolve(import.meta.dirname, '..');

const listening = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.once('connect', () => socket.destroy() && resolve(true)).once('error', () => resolve(false));
  });

describe('npm run dev stopped with SIGTERM to npm', () => {
  it('stops the API it started', { timeout: 30_000 }, async () => {
    const port = await freePort();
    // A hosted project, so no local stack: the API alone.
    const npm = spawn('npm', ['run', 'dev'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', PORT: String(port), SUPABASE_URL: 'http://127.0.0.1:9', DATABASE_URL: asLoginRole(inject('stack').databaseUrl) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    npm.stdout.on('data', (chunk) => (output += chunk));
    npm.stderr.on('data', (chunk) => (output += chunk));
    const exited = new Promise((resolve) => npm.on('exit', resolve));
    await waitFor(() => listening(port), 20_000, `the API on ${port}`);
    npm.kill('SIGTERM');
    await exited;
    await waitFor(async () => !(await listening(port)), 10_000, `nothing listening on ${port} after npm exited:\n${output}`);
  });
});
