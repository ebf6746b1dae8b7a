import { execFile } from 'node:child_process';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { SignJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/config.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, buildTestAppWithLog, TEST_ADMIN_JWT_SECRET } from './support/app.ts';

// The legacy admin token (SPEC 5.5) lives 24 hours. A token signed with the
// right secret but without `iat`, or living longer, is refused: a leaked
// long-lived token must not stay an admin credential for years.

const encoder = new TextEncoder();
const now = () => Math.floor(Date.now() / 1000);
const HOUR = 3600;

function sign(claims: Record<string, unknown>) {
  return new SignJWT(claims).setProtectedHeader({ alg: 'HS256', typ: 'JWT' }).sign(encoder.encode(TEST_ADMIN_JWT_SECRET));
}

describe('legacy admin token lifetime', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp();
  });
  afterAll(async () => app?.close());

  const list = (token: string) =>
    app.inject({ method: 'GET', url: '/api/feedback/get-feedback?limit=1', headers: { authorization: `Bearer ${token}` } });

  it('refuses tokens without iat, living longer than 24 h, or issued in the future', async () => {
    const base = { admin: true, userId: 'ops' };
    const refused: Record<string, string> = {
      'no iat': await sign({ ...base, exp: now() + HOUR }),
      'ten years': await sign({ ...base, iat: now(), exp: now() + 10 * 365 * 24 * HOUR }),
      '25 hours': await sign({ ...base, iat: now(), exp: now() + 25 * HOUR }),
      'iat in the future': await sign({ ...base, iat: now() + 2 * HOUR, exp: now() + 3 * HOUR }),
      'iat not a number': await sign({ ...base, iat: 'yesterday', exp: now() + HOUR }),
    };
    for (const [label, token] of Object.entries(refused)) {
      const response = await list(token);
      expect(response.statusCode, label).toBe(401);
      expect(response.json(), label).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
    }
  });

  it('accepts a 24 h token, and one issued 23 h ago', async () => {
    expect((await list(await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops'))).statusCode).toBe(200);
    expect((await list(await sign({ admin: true, userId: 'ops', iat: now() - 23 * HOUR, exp: now() + HOUR }))).statusCode).toBe(200);
  });

  it('refuses an ADMIN_JWT_SECRET shorter than 32 bytes at start-up, with one line', () => {
    const env = { NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', ADMIN_JWT_SECRET: 'short-secret-31-bytes-xxxxxxxxx' };
    expect(() => parseConfig(env)).toThrow(ConfigError);
    expect(() => parseConfig(env)).toThrow(/^Invalid configuration: ADMIN_JWT_SECRET is invalid \([^\n]*32 bytes[^\n]*\)$/);
    expect(parseConfig({ ...env, ADMIN_JWT_SECRET: 'x'.repeat(32) }).ADMIN_JWT_SECRET).toBe('x'.repeat(32));
  });
});

describe('npm run admin-token', () => {
  function adminTokenCommand(env: Record<string, string>, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
    return new Promise((resolve) =>
      execFile(
        process.execPath,
        [path.resolve(import.meta.dirname, '../scripts/admin-token.ts'), ...args],
        { env: { PATH: process.env.PATH ?? '', ...env }, cwd: '/' },
        (error, stdout, stderr) => resolve({ code: error ? Number(error.code) : 0, stdout, stderr }),
      ),
    );
  }

  it('signs with ADMIN_JWT_SECRET and says so on stderr, the token alone on stdout; the API takes it', async () => {
    const app = await buildTestApp();
    try {
      const signed = await adminTokenCommand({ ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET }, 'ops-1');
      expect(signed.code, signed.stderr).toBe(0);
      expect(signed.stderr).toBe('signed with ADMIN_JWT_SECRET; valid for 24 hours\n');
      const list = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: { authorization: `Bearer ${signed.stdout.trim()}` } });
      expect(list.statusCode).toBe(200);
    } finally {
      await app.close();
    }
  });

  it('a server without ADMIN_JWT_SECRET says at start that it refuses legacy admin tokens', async () => {
    const { app, lines } = await buildTestAppWithLog({ ADMIN_JWT_SECRET: '' }, 'warn');
    try {
      const said = lines.map((line) => JSON.parse(line).msg).filter((msg) => msg.includes('ADMIN_JWT_SECRET'));
      expect(said).toEqual(['ADMIN_JWT_SECRET is not set: legacy admin tokens (npm run admin-token) are all refused (401); set it, or LEGACY_ADMIN_TOKEN=off']);
    } finally {
      await app.close();
    }
  });

  it("with a hosted project's SUPABASE_URL and no ADMIN_JWT_SECRET, refuses (exit 2) instead of signing with the local stack's secret", async () => {
    const refused = await adminTokenCommand({ SUPABASE_URL: 'https://project.supabase.co' }, 'ops-1');
    expect(refused).toEqual({
      code: 2,
      stdout: '',
      stderr: 'ADMIN_JWT_SECRET is not set: put it in .env (the server must have the same one), or, without SUPABASE_URL, run `npm run dev` once to create the local secrets.\n',
    });
  });
});
