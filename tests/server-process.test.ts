import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { parseConfig, parseSettings } from '../src/config.ts';

// The process around the app: configuration errors stop the start with one
// line naming the variable; SIGTERM lets requests in flight finish.

const SERVER = path.resolve(import.meta.dirname, '../src/server.ts');

function startServer(env: Record<string, string>) {
  const child = spawn(process.execPath, [SERVER], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, exited, output: () => output };
}

describe('configuration', () => {
  it('names every missing or invalid variable on one line', () => {
    expect(() => parseConfig({ PORT: 'eighty', CORS_ORIGIN: 'not a url' })).toThrowError(
      /^Invalid configuration: .*PORT is invalid.*CORS_ORIGIN is invalid.*DATABASE_URL is missing/,
    );
  });

  it('applies the documented defaults', () => {
    const config = parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://localhost/x' });
    expect(config).toMatchObject({
      PORT: 3000,
      CORS_ORIGIN: 'http://localhost:5173',
      RATE_LIMIT_AUTH_PER_MIN: 10,
      RATE_LIMIT_RESET_PER_MIN: 5,
      RATE_LIMIT_FEEDBACK_PER_15MIN: 5,
      RATE_LIMIT_GENERAL_PER_15MIN: 100,
    });
  });

  it('a variable set to nothing (a .env copied from .env.example) takes its default', () => {
    const config = parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://localhost/x', PORT: '', HOST: ' ', RATE_LIMIT_AUTH_PER_MIN: '', SMTP_URL: '' });
    expect(config).toMatchObject({ PORT: 3000, HOST: '127.0.0.1', RATE_LIMIT_AUTH_PER_MIN: 10 });
    expect(config.SMTP_URL).toBeUndefined();
    expect(parseSettings({ NODE_ENV: '' }, ['NODE_ENV']).NODE_ENV).toBe('production');
    expect(() => parseConfig({ NODE_ENV: 'development', DATABASE_URL: '' })).toThrowError(/^Invalid configuration: DATABASE_URL is missing$/);
  });

  it('a bad variable stops the process with that one line and exit code 1', async () => {
    const server = startServer({ PORT: '70000' });
    expect(await server.exited).toBe(1);
    expect(server.output().trim().split('\n')).toEqual([
      expect.stringMatching(/^Invalid configuration: PORT is invalid .*; DATABASE_URL is missing$/),
    ]);
  });
});

describe('graceful shutdown', () => {
  it('SIGTERM finishes the request in flight, then exits 0', async () => {
    const port = 40_000 + Math.floor(Math.random() * 10_000);
    const server = startServer({
      NODE_ENV: 'development',
      DATABASE_URL: inject('stack').databaseUrl,
      PORT: String(port),
      LOG_LEVEL: 'info',
    });
    const base = `http://127.0.0.1:${port}`;
    for (let attempt = 0; ; attempt += 1) {
      try {
        if ((await fetch(`${base}/health`)).ok) break;
      } catch {
        if (attempt > 100) throw new Error(`server did not start:\n${server.output()}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    // A request whose body is still arriving when the signal comes is in flight.
    const request = http.request(`${base}/api/auth/signin`, { method: 'POST', headers: { 'content-type': 'application/json' } });
    const answered = new Promise<{ status: number; body: string }>((resolve, reject) => {
      request.on('response', (response) => {
        let body = '';
        response.on('data', (chunk) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      });
      request.on('error', reject);
    });
    request.write('{"email": "someone@example.test"');
    await new Promise((resolve) => setTimeout(resolve, 300));
    server.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 300));
    request.end('}');
    const { status, body } = await answered;
    expect(status).toBe(400);
    expect(JSON.parse(body).error).toBe('Email and password are required');
    expect(await server.exited).toBe(0);
    expect(server.output()).toContain('shutting down');
    await expect(fetch(`${base}/health`)).rejects.toThrow();
  });
});
