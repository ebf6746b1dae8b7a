import { randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { inject } from 'vitest';

// Direct database access for tests: a superuser connection to this run's
// database, users created the way the auth server stores them, and queries
// run as a given user (role `authenticated` with their claims), as basejump's
// database tests do.

export function testSql(): postgres.Sql {
  return postgres(inject('stack').databaseUrl, { max: 4, onnotice: () => {} });
}

export function uniqueEmail(label = 'user'): string {
  return `${label}-${randomUUID().slice(0, 8)}@example.test`;
}

export interface TestUser {
  id: string;
  email: string;
  name: string;
}

/** Inserts an auth.users row as the auth server's own role would. */
/** `metadata` replaces the sign-up metadata ({name}) as an identity provider or the dashboard would set it; `email` may be null (a phone sign-up). */
export async function createAuthUser(
  sql: postgres.Sql,
  { email = uniqueEmail() as string | null, name = 'Test User', metadata = undefined as Record<string, unknown> | undefined } = {},
): Promise<TestUser> {
  const id = randomUUID();
  await sql.begin(async (tx) => {
    await tx`set local role supabase_auth_admin`;
    await tx`
      insert into auth.users (instance_id, id, aud, role, email, raw_user_meta_data, raw_app_meta_data, created_at, updated_at)
      values ('00000000-0000-0000-0000-000000000000', ${id}, 'authenticated', 'authenticated', ${email},
              ${sql.json((metadata ?? { name }) as postgres.JSONValue)}, ${sql.json({ provider: 'email' })}, now(), now())`;
  });
  return { id, email: email ?? '', name };
}

/**
 * Opens a session of `userId` in auth.sessions, as a sign-in does, and returns its id. Without the
 * auth server, a private database has no auth.sessions: it gets the table in the shape the auth
 * server gives it (the columns public.session_is_open reads).
 */
export async function openSession(sql: postgres.Sql, userId: string): Promise<string> {
  // Files run side by side on one database, and `if not exists` does not stop two of them
  // creating the table at once (the second fails on pg_type's unique index): they take turns.
  await sql.begin(async (tx) => {
    await tx`select pg_advisory_xact_lock(hashtext('tests: create auth.sessions'))`;
    await tx`
      create table if not exists auth.sessions (
        id uuid primary key, user_id uuid not null references auth.users (id) on delete cascade,
        created_at timestamptz, updated_at timestamptz, not_after timestamptz)`;
  });
  const sessionId = crypto.randomUUID();
  await sql`insert into auth.sessions (id, user_id, created_at, updated_at) values (${sessionId}, ${userId}, now(), now())`;
  return sessionId;
}

/**
 * Runs `write` in a transaction that stays open, its locks held, until
 * `commit()`: a writer caught mid-transaction, for what others do meanwhile.
 */
export async function openTransaction<T>(sql: postgres.Sql, write: (tx: postgres.TransactionSql) => Promise<T>): Promise<{ result: T; commit(): Promise<void> }> {
  const written = Promise.withResolvers<T>();
  const committing = Promise.withResolvers<void>();
  const transaction = sql.begin(async (tx) => {
    written.resolve(await write(tx));
    await committing.promise;
  });
  transaction.catch(written.reject);
  const result = await written.promise;
  return {
    result,
    async commit() {
      committing.resolve();
      await transaction;
    },
  };
}

/** Waits until a backend of this database waits on a lock while running a statement that contains `text`; false after `timeoutMs`. */
export async function untilWaitingOnLock(sql: postgres.Sql, text: string, timeoutMs = 5_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const waiting = await sql`
      select 1 from pg_stat_activity
       where datname = current_database() and wait_event_type = 'Lock' and strpos(query, ${text}) > 0`;
    if (waiting.length > 0) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return false;
}

export async function grantRole(sql: postgres.Sql, userId: string, role: 'admin' | 'editor' | 'viewer'): Promise<void> {
  await sql`insert into public.user_roles (user_id, role) values (${userId}, ${role}) on conflict do nothing`;
}

/** Runs `work` as `userId` under row-level security, rolled back afterwards. */
export function asUser<T>(sql: postgres.Sql, userId: string | null, work: (tx: postgres.TransactionSql) => Promise<T>): Promise<T> {
  const role = userId ? 'authenticated' : 'anon';
  return asClaims(sql, userId ? { sub: userId, role, aud: 'authenticated' } : { role }, work);
}

/** Runs `work` as the role of `claims`, with those JWT claims, under row-level security, rolled back afterwards. */
export async function asClaims<T>(
  sql: postgres.Sql,
  jwtClaims: { role: 'anon' | 'authenticated' } & Record<string, unknown>,
  work: (tx: postgres.TransactionSql) => Promise<T>,
): Promise<T> {
  const { role } = jwtClaims;
  const claims = JSON.stringify(jwtClaims);
  let result: T | undefined;
  await sql
    .begin(async (tx) => {
      await tx`select set_config('role', ${role}, true), set_config('request.jwt.claims', ${claims}, true)`;
      result = await work(tx);
      throw new Rollback();
    })
    .catch((error) => {
      if (!(error instanceof Rollback)) throw error;
    });
  return result as T;
}

class Rollback extends Error {}

/**
 * Rows the stored log holds for 401s on the feedback list: the shutdown tests
 * refuse such a request, and find it stored only if the log flush ran before
 * the process ended.
 */
export function storedListRefusals(sql: postgres.Sql) {
  return sql`
    select 1 from public.app_logs
     where source = 'server' and (context ->> 'statusCode')::int = 401
       and (context ->> 'route' = 'GET /api/feedback/get-feedback' or message = 'request refused')`;
}

/** What a statement read of one table: sequential scans, the rows they returned, and entries of the table's indexes. */
export interface TableReads {
  table: string;
  seqScans: number;
  seqRows: number;
  indexEntries: number;
}

/**
 * Runs `work` in `tx` and says what it read of each of `tables` (public
 * schema), from the connection's own statistics counts, which PostgreSQL 15
 * sends on only between transactions: the counts after `work` less those
 * before, both inside the transaction, are exactly its reads. Counted, not
 * timed, so a test can say a statement does not read a whole table.
 */
export async function readsDuring<T>(tx: postgres.TransactionSql, tables: string[], work: () => Promise<T>): Promise<{ result: T; reads: TableReads[] }> {
  const counts = () => tx<TableReads[]>`
    select t.relname as table,
           pg_stat_get_xact_numscans(t.oid)::int as "seqScans",
           pg_stat_get_xact_tuples_returned(t.oid)::int as "seqRows",
           coalesce((select sum(pg_stat_get_xact_tuples_returned(i.indexrelid)) from pg_index i where i.indrelid = t.oid), 0)::int as "indexEntries"
      from pg_class t
     where t.relnamespace = 'public'::regnamespace and t.relkind = 'r' and t.relname = any (${tables})`;
  const before = await counts();
  const result = await work();
  const reads = (await counts()).map((after) => {
    const earlier = before.find((row) => row.table === after.table);
    return {
      table: after.table,
      seqScans: after.seqScans - (earlier?.seqScans ?? 0),
      seqRows: after.seqRows - (earlier?.seqRows ?? 0),
      indexEntries: after.indexEntries - (earlier?.indexEntries ?? 0),
    };
  });
  return { result, reads };
}
