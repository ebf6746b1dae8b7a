import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** The module an npm script preloads (`--import <path>`), as a path from the repo root. */
export async function preloadOf(script: string): Promise<string> {
  const { scripts } = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  const preload = /--import (\S+)/.exec(scripts[script] ?? '')?.[1];
  if (!preload) throw new Error(`npm run ${script} preloads nothing: ${scripts[script]}`);
  return preload;
}

/**
 * What a Node process started in a directory holding `dotEnv` as its .env (none when
 * undefined), with `preload` imported first and `env` as its environment, sees of `names`;
 * and what it printed besides.
 */
export async function variablesSeen(preload: string, dotEnv: string | undefined, names: string[], env: Record<string, string> = {}) {
  const dir = await mkdtemp(path.join(tmpdir(), 'dot-env-'));
  try {
    if (dotEnv !== undefined) await writeFile(path.join(dir, '.env'), dotEnv);
    const print = `console.log(JSON.stringify(Object.fromEntries(${JSON.stringify(names)}.map((name) => [name, process.env[name] ?? null]))))`;
    const child = spawn(process.execPath, ['--import', path.resolve(ROOT, preload), '-e', print], { cwd: dir, env: { PATH: process.env.PATH ?? '', ...env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    const [seen, ...rest] = stdout.split('\n');
    return { code, seen: JSON.parse(seen || 'null') as Record<string, string | null> | null, printed: rest.join('\n').trim() + stderr };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** A .env as an operator leaves it: a value of spaces alone, one of a tab, a comment, an empty one, a quoted one. */
export const TRICKY_DOT_ENV = [
  'CAPTCHA_SECRET=   ',
  'ADMIN_JWT_SECRET=0123456789abcdef0123456789abcdef',
  'METRICS_TOKEN=\t',
  '# PORT=1',
  'PORT=',
  'HOST="127.0.0.1" # the loopback',
  'GIVEN=from the file',
  '',
].join('\n');

/** What TRICKY_DOT_ENV holds, with GIVEN set in the environment to 'from the environment'. */
export const TRICKY_EXPECTED = {
  CAPTCHA_SECRET: '',
  ADMIN_JWT_SECRET: '0123456789abcdef0123456789abcdef',
  METRICS_TOKEN: '',
  PORT: '',
  HOST: '127.0.0.1',
  GIVEN: 'from the environment',
};

/** The variables TRICKY_DOT_ENV sets. */
export const TRICKY_NAMES = Object.keys(TRICKY_EXPECTED);
