import { execFile } from 'node:child_process';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import type { DbActor, Tx } from '../src/plugins/db.ts';
import { buildTestApp } from './support/app.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// The data path connects as a login role that can only switch to anon,
// authenticated and service_role (as PostgREST's `authenticator` does), never
// as the owner or a superuser. Whatever SQL ran inside a request's
// transaction, it could not become the owner, change the schema, switch RLS
// off or read the cluster's secrets. Migrations still run as the owner
// (the stack applies them as `postgres`), and so does grant-role: given the
// API's login role, each says in one line what to set.

let app: FastifyInstance;

beforeAll(async () => {
  app = await buildTestApp();
});
afterAll(async () => app?.close());

class RolledBack extends Error {}

/**
 * Runs `statement` as `actor` in a transaction of the app's own pool, always
 * rolled back (role changes are transactional too, so even a statement that
 * gets through changes nothing); the SQLSTATE it failed with, or 'ran'.
 */
async function attempt(actor: DbActor | 'elevated', statement: string): Promise<string> {
  const run = async (tx: Tx) => {
    await tx.unsafe(statement);
    throw new RolledBack();
  };
  try {
    if (actor === 'elevated') await app.db.sql.begin(async (tx) => run(tx));
    else await app.db.asActor(actor, async (tx) => run(tx));
    return 'no outcome';
  } catch (error) {
    if (error instanceof RolledBack) return 'ran';
    return String((error as { code?: string }).code ?? (error as Error).message);
  }
}

const ESCAPES = [
  'set role postgres',
  "select set_config('role', 'postgres', true)",
  'set session authorization postgres',
  'create table public.escaped (id int)',
  'alter table public.feedback disable row level security',
  'drop policy "Admins can read feedback" on public.feedback',
  'create role escaped_role login superuser',
  'alter role anon bypassrls',
  'grant service_role to anon',
  'select rolpassword from pg_authid',
  "copy (select 1) to program 'true'",
  "select pg_read_file('postgresql.conf')",
  'create extension if not exists dblink',
];

describe('least privilege on the data path', () => {
  it('connects as a login role that is no superuser; elevated work runs as service_role', async () => {
    const [who] = await app.db.sql<{ session_user: string; current_user: string; superuser: boolean; owns_public: boolean }[]>`
      select session_user, current_user,
             (select rolsuper from pg_roles where rolname = session_user) as superuser,
             pg_has_role(session_user, (select nspowner from pg_namespace where nspname = 'public'), 'MEMBER') as owns_public`;
    expect(who).toEqual({ session_user: 'authenticator', current_user: 'service_role', superuser: false, owns_public: false });
    const [roles] = await app.db.sql<{ roles: string[] }[]>`
      select array_agg(r.rolname::text order by r.rolname) as roles
        from pg_auth_members m join pg_roles r on r.oid = m.roleid
       where m.member = (select oid from pg_roles where rolname = session_user)`;
    expect(roles.roles).toEqual(['anon', 'authenticated', 'service_role']);
  });

  it('each request runs as its own role', async () => {
    const roleOf = (actor: DbActor) => app.db.asActor(actor, async (tx) => (await tx<{ role: string }[]>`select current_user as role`)[0].role);
    expect(await roleOf({ role: 'anon' })).toBe('anon');
    expect(await roleOf({ role: 'authenticated', claims: { sub: crypto.randomUUID(), role: 'authenticated' } })).toBe('authenticated');
    expect(await roleOf({ role: 'service_role' })).toBe('service_role');
  });

  const actors: [string, DbActor | 'elevated'][] = [
    ['anon', { role: 'anon' }],
    ['authenticated', { role: 'authenticated', claims: { sub: crypto.randomUUID(), role: 'authenticated' } }],
    ['service_role (legacy admin)', { role: 'service_role' }],
    ['the elevated path', 'elevated'],
  ];
  for (const [label, actor] of actors) {
    it(`as ${label}, no statement escapes: owner, superuser, schema, RLS and secrets are out of reach`, async () => {
      const outcomes: Record<string, string> = {};
      for (const statement of ESCAPES) outcomes[statement] = await attempt(actor, statement);
      const escaped = Object.entries(outcomes).filter(([, outcome]) => outcome === 'ran');
      expect(escaped, JSON.stringify(outcomes, null, 2)).toEqual([]);
    });
  }

  it('production refuses to start when DATABASE_URL logs in as a superuser or the owner', async () => {
    const { spawn } = await import('node:child_process');
    const path = await import('node:path');
    const { inject } = await import('vitest');
    const child = spawn(process.execPath, [path.resolve(import.meta.dirname, '../src/server.ts')], {
      env: {
        PATH: process.env.PATH ?? '',
        NODE_ENV: 'production',
        PORT: '0',
        // The refusal is printed whatever the level; the start's log lines are not under test.
        LOG_LEVEL: 'silent',
        DATABASE_URL: inject('stack').databaseUrl,
        SUPABASE_JWT_SECRET: 'x'.repeat(40),
        ADMIN_JWT_SECRET: 'y'.repeat(40),
        ANALYTICS_SALT_SECRET: 'z'.repeat(40),
        CAPTCHA_PROVIDER: 'off',
        FEEDBACK_OUTBOX_WORKER: 'false',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    const code = await new Promise<number | null>((resolve) => child.on('exit', (exitCode) => resolve(exitCode)));
    clearTimeout(timer);
    expect(code, output).toBe(1);
    expect(output.trim().split('\n')).toEqual([expect.stringMatching(/^Invalid configuration: DATABASE_URL connects as postgres, a superuser/)]);
  });

  it('RESET ROLE inside a request lands on no more than service_role, never the owner', async () => {
    let role = { role: '', superuser: true };
    await app.db
      .asActor({ role: 'anon' }, async (tx) => {
        await tx`reset role`;
        role = (await tx<{ role: string; superuser: boolean }[]>`select current_user as role, (select rolsuper from pg_roles where rolname = current_user) as superuser`)[0];
        throw new RolledBack();
      })
      .catch((error) => {
        if (!(error instanceof RolledBack)) throw error;
      });
    expect(role.superuser).toBe(false);
    expect(['authenticator', 'service_role']).toContain(role.role);
  });
});

describe('owner-level scripts given the API login role', () => {
  const database = usePrivateDatabase('owner_scripts');

  /** `npm run <script>` without a .env: its exit code and output lines. */
  function runScript(script: string, args: string[], env: Record<string, string>) {
    return new Promise<{ code: number | null; stdout: string[]; stderr: string[] }>((resolve) => {
      execFile(process.execPath, [path.resolve(import.meta.dirname, `../scripts/${script}.ts`), ...args], { env: { PATH: process.env.PATH ?? '', ...env } }, (error, stdout, stderr) =>
        resolve({ code: error ? (error.code as number) : 0, stdout: lines(stdout), stderr: lines(stderr) }),
      );
    });
  }
  const lines = (text: string) => text.trim().split('\n').filter(Boolean);
  const NEEDS_OWNER = "the owner: set DATABASE_OWNER_URL (DATABASE_URL is the API's login role)";

  it('npm run migrate: one line, migrations need the owner', async () => {
    const { code, stderr } = await runScript('migrate', [], { DATABASE_URL: asLoginRole(database.url) });
    expect(code).toBe(1);
    expect(stderr).toEqual([expect.stringMatching(/^npm run migrate: .*permission denied/)]);
    expect(stderr[0].endsWith(`; migrations need ${NEEDS_OWNER}`), stderr[0]).toBe(true);
  });

  it('npm run grant-role: one line, grant-role needs the owner, not a stack trace', async () => {
    const { code, stderr } = await runScript('role', ['grant', 'someone@example.test', 'admin'], { DATABASE_URL: asLoginRole(database.url) });
    expect(code).toBe(1);
    expect(stderr).toEqual([`npm run grant-role: permission denied for table profiles; grant-role needs ${NEEDS_OWNER}`]);
  });

  it("npm run grant-role with neither variable set uses npm run dev's database, and says so", async () => {
    const { code, stderr } = await runScript('role', ['grant', 'nobody-at-all@example.test', 'viewer'], {});
    expect(code).toBe(1);
    expect(stderr[0]).toBe(
      "DATABASE_OWNER_URL and DATABASE_URL are not set: using npm run dev's local database, postgres://postgres@127.0.0.1:5432/portfolio_dev",
    );
  });
});

describe("the admins' e-mail addresses (feedback notification recipients)", () => {
  it('are read by the elevated path only, through a function that pins its search_path: anon and users are refused', async () => {
    const statement = 'select * from public.admin_notification_emails()';
    expect(await attempt({ role: 'anon' }, statement)).toBe('42501');
    expect(await attempt({ role: 'authenticated', claims: { sub: crypto.randomUUID(), role: 'authenticated' } }, statement)).toBe('42501');
    expect(await attempt('elevated', statement)).toBe('ran');
    const [fn] = await app.db.sql<{ definer: boolean; config: string[] }[]>`
      select prosecdef as definer, proconfig as config from pg_proc where oid = 'public.admin_notification_emails()'::regprocedure`;
    expect(fn).toEqual({ definer: true, config: ['search_path=""'] });
  });
});
