import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cp, mkdir, mkdtemp, readFile, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPrivateDatabase } from './support/private-database.ts';

// README lets an image run `npm ci --omit=dev` after the build; the commands
// it names for a deployment (npm start, migrate, grant-role, revoke-role,
// admin-token) must then still run. Here they run in a copy of the project
// whose node_modules holds only what `npm ci --omit=dev` installs: the
// lockfile's packages not marked `dev`, linked from this checkout (a real
// `npm ci` there took ~20 s more and the network). A static import of the
// local stack's servers anywhere on their way fails them with
// ERR_MODULE_NOT_FOUND, as it did in the slim image a review deployed.

const ROOT = path.resolve(import.meta.dirname, '..');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

let copy: string;
let database: Awaited<ReturnType<typeof createPrivateDatabase>>;
let sql: postgres.Sql;

/** The project's sources beside a node_modules of its production dependencies alone. */
async function productionCopy(): Promise<string> {
  const directory = await mkdtemp(path.join(tmpdir(), 'production-install-'));
  for (const part of ['package.json', 'src', 'scripts', 'supabase']) await cp(path.join(ROOT, part), path.join(directory, part), { recursive: true });
  const lock = JSON.parse(await readFile(path.join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, { dev?: boolean }> };
  for (const [key, entry] of Object.entries(lock.packages)) {
    // Top-level packages only: a nested one comes with its parent's link.
    const name = /^node_modules\/((?:@[^/]+\/)?[^/]+)$/.exec(key)?.[1];
    if (!name || entry.dev) continue;
    const target = path.join(directory, 'node_modules', name);
    await mkdir(path.dirname(target), { recursive: true });
    await symlink(path.join(ROOT, 'node_modules', name), target);
  }
  return directory;
}

/** A command as its npm script runs it (`node --import ./scripts/env-file.ts …`), in the copy, with no .env and only `env`. */
function run(args: string[], env: Record<string, string> = {}): Promise<Run> {
  const child = spawn(process.execPath, args, { cwd: copy, env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk) => (stdout += chunk));
  child.stderr.on('data', (chunk) => (stderr += chunk));
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, stdout, stderr })));
}
const script = (file: string, ...args: string[]) => ['--import', './scripts/env-file.ts', `scripts/${file}`, ...args];

beforeAll(async () => {
  [copy, database] = await Promise.all([productionCopy(), createPrivateDatabase('production_install')]);
  sql = postgres(database.url, { max: 1, onnotice: () => {} });
});
afterAll(async () => {
  await sql?.end();
  await database?.drop();
  if (copy) await rm(copy, { recursive: true, force: true });
});

describe('an install without the dev dependencies (npm ci --omit=dev)', () => {
  it('has none of them: the local stack cannot load there', async () => {
    await expect(stat(path.join(copy, 'node_modules/oidc-provider'))).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(stat(path.join(copy, 'node_modules/smtp-server'))).rejects.toMatchObject({ code: 'ENOENT' });
    // The local stack's config reader: a dev dependency, so migrate and grant-role below run without it.
    await expect(stat(path.join(copy, 'node_modules/smol-toml'))).rejects.toMatchObject({ code: 'ENOENT' });
    const stack = await run(['--input-type=module', '-e', "await import('./scripts/stack/index.ts')"]);
    expect(stack.stderr).toContain('ERR_MODULE_NOT_FOUND');
  });

  it('npm run migrate applies to DATABASE_OWNER_URL, and says a database migrated by a later release is ahead (exit 0)', async () => {
    const env = { DATABASE_OWNER_URL: database.url };
    const current = await run(script('migrate.ts'), env);
    expect(current, current.stderr).toMatchObject({ code: 0, stdout: 'database is up to date\n', stderr: '' });

    await sql`insert into supabase_migrations.schema_migrations (version, name) values ('29991231000000', 'from_a_later_release')`;
    const ahead = await run(script('migrate.ts'), env);
    expect(ahead, ahead.stderr).toMatchObject({
      code: 0,
      stdout: 'database is ahead of this release: it has 1 migration newer than its files (newest 29991231000000_from_a_later_release.sql); nothing applied\n',
      stderr: '',
    });
    await sql`delete from supabase_migrations.schema_migrations where version = '29991231000000'`;
  });

  it('npm run migrate with no database URL says in one line to set DATABASE_OWNER_URL (exit 2)', async () => {
    const outcome = await run(script('migrate.ts'));
    expect(outcome.code, outcome.stderr).toBe(2);
    expect(outcome.stderr).toMatch(
      /^DATABASE_OWNER_URL and DATABASE_URL are not set, and npm run dev's local stack is not installed here \(no [\w@/.-]+: dev dependencies omitted\): set DATABASE_OWNER_URL to the database's owner\n$/,
    );
  });

  it('npm run grant-role and revoke-role change a role as the owner', async () => {
    const email = `slim-${randomUUID().slice(0, 8)}@example.test`;
    await sql`insert into auth.users (id, email, raw_user_meta_data) values (${randomUUID()}, ${email}, '{}')`;
    const env = { DATABASE_OWNER_URL: database.url };
    const granted = await run(script('role.ts', 'grant', email, 'editor'), env);
    expect(granted.code, granted.stderr).toBe(0);
    expect(granted.stdout).toContain('now has: editor');
    const revoked = await run(script('role.ts', 'revoke', email, 'editor'), env);
    expect(revoked.code, revoked.stderr).toBe(0);
    expect(revoked.stdout).toContain('now has: no role');
  });

  it('npm run admin-token signs with ADMIN_JWT_SECRET', async () => {
    const outcome = await run(script('admin-token.ts', randomUUID()), { ADMIN_JWT_SECRET: 'a'.repeat(64) });
    expect(outcome.code, outcome.stderr).toBe(0);
    expect(outcome.stdout).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+\n$/);
  });

  it('the server loads everything it imports: unconfigured, it stops at its configuration, not at a missing package', async () => {
    // Every import is resolved before the first line runs, so reaching the configuration check means all loaded.
    const outcome = await run(['src/server.ts']);
    expect(outcome.code).toBe(1);
    expect(outcome.stderr).not.toContain('ERR_MODULE_NOT_FOUND');
    expect(outcome.stderr).toMatch(/^Invalid configuration: /);
  });
});
