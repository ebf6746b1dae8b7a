import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { asLoginRole } from '../src/lib/database-url.ts';

// `npm run dev` that cannot start ends with one line saying why and a
// non-zero exit code, never a stack trace. Each case fails before the local
// stack would take its fixed ports or the portfolio_dev database.

const DEV = path.resolve(import.meta.dirname, '../scripts/dev.ts');

/** scripts/dev.ts as `npm run dev` runs it, without a .env: its exit code, stdout and stderr. */
function runDev(env: Record<string, string>): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [DEV], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGINT'), 20_000);
  return new Promise((resolve) =>
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    }),
  );
}

describe('npm run dev that cannot start', () => {
  it('SUPABASE_AUTH_BIN naming no executable: one line naming it, exit code 1', async () => {
    const { code, stderr } = await runDev({ SUPABASE_AUTH_BIN: '/nonexistent', PORT: String(await freePort()) });
    expect(code, stderr).toBe(1);
    expect(stderr.trim().split('\n')).toEqual(['npm run dev: SUPABASE_AUTH_BIN=/nonexistent is not an executable file']);
  });

  it('a bad setting: the config line, exit code 1, before anything starts', async () => {
    const { code, stdout, stderr } = await runDev({ TRUST_PROXY: 'true', PORT: String(await freePort()) });
    expect(code, stderr).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([
      'npm run dev: Invalid configuration: TRUST_PROXY is invalid (true would trust every X-Forwarded-For entry; give the number of proxies (e.g. 1) or their addresses / CIDR ranges)',
    ]);
    expect(stdout).not.toContain('starting the local stack');
  });

  it('PostgreSQL not answering: one line naming the server and LOCAL_POSTGRES_URL, exit code 1', async () => {
    // Nothing listens on a port freePort just released.
    const closed = await freePort();
    const { code, stdout, stderr } = await runDev({ LOCAL_POSTGRES_URL: `postgres://postgres@127.0.0.1:${closed}/postgres`, PORT: String(await freePort()) });
    expect(code, stderr).toBe(1);
    expect(stderr.trim().split('\n')).toEqual([
      `npm run dev: PostgreSQL at 127.0.0.1:${closed} is not reachable or refused to create portfolio_dev: connect ECONNREFUSED 127.0.0.1:${closed} (LOCAL_POSTGRES_URL names another server)`,
    ]);
    expect(stdout).toContain('starting the local stack');
  });

  it("the API's port taken: one line naming it and PORT, exit code 1", async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as net.AddressInfo;
    try {
      // A hosted project, so no local stack is started.
      const { code, stdout, stderr } = await runDev({
        PORT: String(port),
        SUPABASE_URL: 'http://127.0.0.1:9',
        DATABASE_URL: asLoginRole(inject('stack').databaseUrl),
      });
      expect(code, stderr).toBe(1);
      expect(stderr.trim().split('\n')).toEqual([`npm run dev: port ${port} on 127.0.0.1 is taken (the API, PORT): stop what listens there, or set PORT`]);
      // Which project it was to use, and why no local stack, said before the port was checked.
      expect(stdout.trim().split('\n')).toEqual(['SUPABASE_URL and DATABASE_URL are set: using that project (http://127.0.0.1:9); the local stack is not started.']);
    } finally {
      await new Promise((resolve) => taken.close(resolve));
    }
  });
});
