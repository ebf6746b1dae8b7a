import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { stackEnvironment } from '../scripts/stack/environment.ts';
import { preloadOf, TRICKY_DOT_ENV, TRICKY_EXPECTED, TRICKY_NAMES, variablesSeen } from './support/dot-env.ts';

// The .env that `npm run dev`, migrate and the other scripts read, through the
// module their npm scripts preload (the compiled one `npm start` preloads is in
// build.test.ts). Node's own --env-file gave a value of spaces alone the next
// line: CAPTCHA_SECRET was 'ADMIN_JWT_SECRET=…', and ADMIN_JWT_SECRET unset.

const ROOT = path.resolve(import.meta.dirname, '..');

describe('.env, as the scripts read it', () => {
  it.each(['dev', 'migrate', 'admin-token', 'grant-role', 'revoke-role'])('npm run %s reads each line as written; the environment wins', async (script) => {
    const result = await variablesSeen(await preloadOf(script), TRICKY_DOT_ENV, TRICKY_NAMES, { GIVEN: 'from the environment' });
    expect(result).toEqual({ code: 0, seen: TRICKY_EXPECTED, printed: '' });
  });

  it('without a .env: nothing set, nothing said', async () => {
    const result = await variablesSeen(await preloadOf('dev'), undefined, ['PORT']);
    expect(result).toEqual({ code: 0, seen: { PORT: null }, printed: '' });
  });
});

describe('the local stack\'s own settings, for npm test and the benchmarks (which load no .env)', () => {
  it('takes LOCAL_POSTGRES_URL and SUPABASE_AUTH_BIN from .env when the environment has none, and nothing else', async () => {
    const dir = await mkdtemp(path.join(tmpdir(), 'stack-env-'));
    try {
      await writeFile(
        path.join(dir, '.env'),
        ['LOCAL_POSTGRES_URL=postgres://postgres@127.0.0.1:6543/postgres', `SUPABASE_AUTH_BIN=${path.join(dir, 'auth')}`, 'DATABASE_URL=postgres://hosted.example/postgres', ''].join('\n'),
      );
      const script = [
        `import { localPostgresUrl } from ${JSON.stringify(path.join(ROOT, 'scripts/stack/index.ts'))};`,
        `import { findAuthBinary } from ${JSON.stringify(path.join(ROOT, 'scripts/stack/auth-server.ts'))};`,
        'let auth; try { auth = findAuthBinary(); } catch (error) { auth = error.message; }',
        'console.log(JSON.stringify({ postgres: localPostgresUrl(), auth, databaseUrl: process.env.DATABASE_URL ?? null }));',
      ].join('\n');
      const run = (env: Record<string, string>) => {
        const child = spawnSync(process.execPath, ['--input-type=module', '-e', script], { cwd: dir, env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8' });
        expect(child.stderr).toBe('');
        return JSON.parse(child.stdout);
      };
      expect(run({})).toEqual({
        postgres: 'postgres://postgres@127.0.0.1:6543/postgres',
        auth: `SUPABASE_AUTH_BIN=${path.join(dir, 'auth')} is not an executable file`,
        databaseUrl: null,
      });
      // The environment wins, as everywhere else.
      expect(run({ LOCAL_POSTGRES_URL: 'postgres://postgres@127.0.0.1:5432/postgres', SUPABASE_AUTH_BIN: '' }).postgres).toBe('postgres://postgres@127.0.0.1:5432/postgres');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('leaves every other variable of .env out', () => {
    const env = stackEnvironment({ PATH: '/bin' }, { SUPABASE_AUTH_BIN: '/opt/auth', PORT: '1', DATABASE_URL: 'postgres://hosted.example/postgres' });
    expect(env).toEqual({ PATH: '/bin', SUPABASE_AUTH_BIN: '/opt/auth' });
  });
});
