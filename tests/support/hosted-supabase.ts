import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { inject } from 'vitest';
import { applyPlatform, createDatabase, databaseUrl, dropDatabase } from '../../scripts/stack/database.ts';
import { uniqueDatabaseName } from '../../scripts/stack/index.ts';
import { asLoginRole } from '../../src/lib/database-url.ts';

// A database set up as a hosted Supabase project is, as far as our
// migrations can tell: the owner that applies them is no superuser but a role
// with the rights Supabase gives its own `postgres`, read from
// supabase/postgres (migrations/db): 10000000000000_demote-postgres (NOSUPERUSER
// CREATEDB CREATEROLE REPLICATION BYPASSRLS), 20211115181400_update-auth-permissions
// (USAGE on auth; ALL on the auth server's tables, sequences and routines, and
// on those it makes later), 20230201083204 and 20250605172253 (member of anon,
// authenticated and service_role, with ADMIN OPTION from PostgreSQL 16),
// 20240606060239 (pg_read_all_data, pg_signal_backend), and the 2025
// restriction, 20250421084701_revoke_admin_roles_from_postgres: no longer a
// member of supabase_auth_admin, no CREATE on schema auth, nothing on
// auth.schema_migrations. The local `postgres` is the superuser, so the owner
// here has a name of its own. Not modelled: supautils (hosted it lets the
// owner drop triggers and manage policies on the auth tables, and keeps it
// from altering the API roles), which no migration of ours relies on.
//
// The auth schema is the local bootstrap's (supabase/local/platform.sql,
// owned by supabase_auth_admin), extended by the auth server's own
// migrations (`auth migrate`, as supabase_auth_admin) when a binary is given.

export interface HostedDatabase {
  /** The database as the local superuser, for setting up and looking in. */
  url: string;
  /** The same database as the hosted-style owner, which applies the migrations. */
  ownerUrl: string;
  owner: string;
  /** Whether the auth server's migrations ran (else only the bootstrap's first auth tables are there). */
  authMigrated: boolean;
  drop(): Promise<void>;
}

/** The grants of Supabase's `postgres`, given to `owner`; our own SQL, the effect of the scripts named above. */
function ownerRoleStatements(owner: string, database: string, serverVersion: number): string[] {
  const withAdmin = serverVersion >= 160000 ? ' with admin option' : '';
  return [
    `create role ${owner} login nosuperuser createdb createrole replication bypassrls`,
    `grant anon, authenticated, service_role to ${owner}${withAdmin}`,
    `grant pg_read_all_data, pg_signal_backend to ${owner}`,
    // Hosted, public is owned by pg_database_owner; CREATE on it, without
    // owning the database, is the narrower of the two ways to let the owner build there.
    `grant all on database ${database} to ${owner}`,
    `grant usage, create on schema public to ${owner}`,
    ...['tables', 'functions', 'sequences'].map((kind) => `alter default privileges for role ${owner} in schema public grant all on ${kind} to anon, authenticated, service_role`),
    `grant usage on schema extensions to ${owner}`,
    ...['tables', 'routines', 'sequences'].map((kind) => `grant all on all ${kind} in schema extensions to ${owner}`),
    `grant usage on schema auth to ${owner}`,
    ...['tables', 'routines', 'sequences'].map((kind) => `grant all on all ${kind} in schema auth to ${owner}`),
    ...['tables', 'routines', 'sequences'].map((kind) => `alter default privileges for role supabase_auth_admin in schema auth grant all on ${kind} to ${owner}`),
  ];
}

/** `auth migrate` as supabase_auth_admin, from a directory with no `.env` (the binary reads `./.env`). */
async function migrateAuth(binary: string, url: string): Promise<void> {
  const workdir = await mkdtemp(path.join(tmpdir(), 'hosted-auth-'));
  const target = new URL(asLoginRole(url, 'supabase_auth_admin'));
  target.searchParams.set('sslmode', 'disable');
  const env = {
    PATH: process.env.PATH,
    GOTRUE_DB_DRIVER: 'postgres',
    GOTRUE_DB_DATABASE_URL: target.toString(),
    API_EXTERNAL_URL: 'http://127.0.0.1:9999',
    GOTRUE_SITE_URL: 'http://127.0.0.1:5173',
    GOTRUE_JWT_SECRET: randomBytes(32).toString('hex'),
  };
  try {
    await new Promise<void>((resolve, reject) => {
      const child = spawn(binary, ['migrate'], { env, cwd: workdir, stdio: ['ignore', 'pipe', 'pipe'] });
      let output = '';
      child.stdout.on('data', (chunk) => (output += chunk));
      child.stderr.on('data', (chunk) => (output += chunk));
      child.on('error', reject);
      child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`auth migrate exited ${code}:\n${output.trim().split('\n').slice(-10).join('\n')}`))));
    });
  } finally {
    await rm(workdir, { recursive: true, force: true });
  }
}

/** A fresh database and owner role as a hosted project has them; `drop()` removes both. */
export async function createHostedDatabase(label: string): Promise<HostedDatabase> {
  const { postgresUrl, auth } = inject('stack');
  const name = uniqueDatabaseName(`portfolio_${label}`);
  const owner = `${name}_owner`;
  await createDatabase(postgresUrl, name);
  const url = databaseUrl(postgresUrl, name);
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  const drop = async () => {
    await dropDatabase(postgresUrl, name);
    const server = postgres(postgresUrl, { max: 1, onnotice: () => {} });
    try {
      await server.unsafe(`drop role if exists ${owner}`);
    } finally {
      await server.end({ timeout: 5 });
    }
  };
  try {
    await applyPlatform(url);
    const [{ version }] = await sql`select current_setting('server_version_num')::int as version`;
    for (const statement of ownerRoleStatements(owner, name, version)) await sql.unsafe(statement);
    // As hosted, the auth server's migrations run after the grants above, so
    // the tables they make reach the owner through the default privileges.
    if (auth) await migrateAuth(auth.binary, url);
    await sql.unsafe(`revoke all on auth.schema_migrations from ${owner}`);
  } catch (error) {
    await sql.end({ timeout: 5 });
    await drop();
    throw error;
  }
  await sql.end({ timeout: 5 });
  return { url, ownerUrl: asLoginRole(url, owner), owner, authMigrated: auth !== null, drop };
}
