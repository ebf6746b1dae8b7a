import { spawn } from 'node:child_process';
import { access, mkdir } from 'node:fs/promises';
import path from 'node:path';
import { ROOT } from './database.ts';

// Supabase Auth (GoTrue), built from its Go module at a pinned commit with
// the machine's Go toolchain, once, into a git-ignored cache folder.

export const AUTH_MODULE = 'github.com/supabase/auth';
/** The commit of tag v2.189.0; later tags carry a `replace` directive that `go install` refuses. */
export const AUTH_COMMIT = '4fa66ba71d8c55b5c95cd5635766ed8bbae6d96a';
const CACHE_DIR = path.join(ROOT, '.cache/gotrue', AUTH_COMMIT);

export class AuthBuildError extends Error {}

export function authBinaryPath(): string {
  return path.join(CACHE_DIR, 'auth');
}

async function exists(file: string): Promise<boolean> {
  return access(file).then(
    () => true,
    () => false,
  );
}

/** Returns the path of the built binary, building it first when the cache has none. */
export async function ensureAuthBinary(log: (line: string) => void = console.log): Promise<string> {
  const binary = authBinaryPath();
  if (await exists(binary)) return binary;
  await mkdir(CACHE_DIR, { recursive: true });
  log(`Building Supabase Auth (${AUTH_MODULE}@${AUTH_COMMIT.slice(0, 12)}) with ${process.env.GOPROXY ?? 'the Go module proxy'}; the first build takes a few minutes…`);

  const output: string[] = [];
  const started = Date.now();
  const code = await new Promise<number>((resolve, reject) => {
    const child = spawn('go', ['install', '-v', `${AUTH_MODULE}@${AUTH_COMMIT}`], {
      env: { ...process.env, GOBIN: CACHE_DIR, CGO_ENABLED: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let packages = 0;
    const onLine = (chunk: Buffer) => {
      for (const line of chunk.toString().split('\n').filter(Boolean)) {
        output.push(line);
        if (!line.startsWith('go: ')) packages += 1;
        if (packages % 25 === 0 || line.startsWith('go: ')) log(`  [auth build ${Math.round((Date.now() - started) / 1000)}s] ${packages} packages · ${line}`);
      }
    };
    child.stdout.on('data', onLine);
    child.stderr.on('data', onLine);
    child.on('error', reject);
    child.on('close', (status) => resolve(status ?? 1));
  });
  if (code !== 0) {
    const errors = output.filter((line) => line.startsWith('go: ') || /error|forbidden|not available/i.test(line));
    throw new AuthBuildError(`go install ${AUTH_MODULE}@${AUTH_COMMIT} failed (exit ${code}):\n${(errors.length ? errors : output.slice(-20)).join('\n')}`);
  }
  // go install names the binary after the module's last path element.
  const built = path.join(CACHE_DIR, 'auth');
  if (!(await exists(built))) throw new AuthBuildError(`go install succeeded but ${built} is missing`);
  log(`Supabase Auth built in ${Math.round((Date.now() - started) / 1000)} s`);
  return built;
}
