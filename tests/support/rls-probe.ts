import type postgres from 'postgres';

// Generic row-level security probes for tests/rls-attacks.test.ts: the
// tables of schema public as the catalog describes them, and one statement
// tried as a given database role with given claims, in a transaction that is
// always rolled back. After the statement, still inside that transaction and
// back under the connection's superuser role, the probe reads what the
// statement left behind, so "nothing changed" is checked on the very state
// the attack produced, and no test commits anything.

export interface Attacker {
  label: string;
  role: 'anon' | 'authenticated' | 'service_role';
  /** auth.users id for `authenticated`; null otherwise. */
  userId: string | null;
}

export interface ColumnInfo {
  name: string;
  type: string;
  /** False for `generated always` identity and generated columns, which no one may set. */
  settable: boolean;
}

export interface TableInfo {
  name: string;
  rowSecurity: boolean;
  columns: ColumnInfo[];
  primaryKey: string[];
}

export type Outcome = { refused: true; code: string; message: string } | { refused: false; count: number; rows: Record<string, unknown>[] };

export const ident = (name: string) => `"${name.replaceAll('"', '""')}"`;
export const qualified = (table: string) => `public.${ident(table)}`;

/** Ordinary and partitioned tables of schema public, with columns and primary key. */
export async function publicTables(sql: postgres.Sql): Promise<TableInfo[]> {
  const rows = await sql<{ name: string; row_security: boolean; columns: ColumnInfo[]; primary_key: string[] }[]>`
    select c.relname as name, c.relrowsecurity as row_security,
           (select json_agg(json_build_object('name', a.attname, 'type', format_type(a.atttypid, a.atttypmod),
                                              'settable', a.attidentity <> 'a' and a.attgenerated = '') order by a.attnum)
              from pg_attribute a where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped) as columns,
           coalesce((select json_agg(a.attname order by array_position(i.indkey::int2[], a.attnum))
                       from pg_index i join pg_attribute a on a.attrelid = i.indrelid and a.attnum = any (i.indkey)
                      where i.indrelid = c.oid and i.indisprimary), '[]'::json) as primary_key
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where n.nspname = 'public' and c.relkind in ('r', 'p')
     order by c.relname`;
  return rows.map((row) => ({ name: row.name, rowSecurity: row.row_security, columns: row.columns, primaryKey: row.primary_key }));
}

/** Columns of `table` on which `role` holds `privilege` (column or table grant). */
export async function columnsWith(sql: postgres.Sql, role: string, table: TableInfo, privilege: 'INSERT' | 'UPDATE'): Promise<string[]> {
  const held: string[] = [];
  for (const column of table.columns) {
    if (!column.settable) continue;
    const [row] = await sql`select has_column_privilege(${role}, ${`public.${table.name}`}::regclass, ${column.name}, ${privilege}) as held`;
    if (row.held) held.push(column.name);
  }
  return held;
}

/** Rows of `table` whose JSON mentions one of `markers` (ids the test created), as superuser. */
export async function markedRows(sql: postgres.Sql | postgres.TransactionSql, table: string, markers: string[]): Promise<Record<string, unknown>[]> {
  const rows = await sql.unsafe<{ row: Record<string, unknown> }[]>(
    `select to_jsonb(t) as row from ${qualified(table)} as t where to_jsonb(t)::text ~ $1 order by to_jsonb(t)::text`,
    [markers.join('|')],
  );
  return rows.map((r) => r.row);
}

/** How many rows of `table` mention `userId`, as superuser: the rows a user may call their own. */
export async function ownRowCount(sql: postgres.Sql | postgres.TransactionSql, table: string, userId: string | null): Promise<number> {
  if (!userId) return 0;
  const [row] = await sql.unsafe<{ n: number }[]>(`select count(*)::int as n from ${qualified(table)} as t where to_jsonb(t)::text ~ $1`, [userId]);
  return row.n;
}

class Rollback extends Error {}

export type Statement = (tx: postgres.TransactionSql) => ReturnType<postgres.TransactionSql['unsafe']>;

/**
 * Runs `statement` as `attacker` and then `inspect` as superuser on the state
 * the statement left, in one transaction that is rolled back.
 */
export async function attempt<T>(
  sql: postgres.Sql,
  attacker: Attacker,
  statement: Statement,
  inspect: (tx: postgres.TransactionSql) => Promise<T>,
): Promise<{ outcome: Outcome; after: T }> {
  const claims = JSON.stringify(attacker.userId ? { sub: attacker.userId, role: attacker.role, aud: 'authenticated' } : { role: attacker.role });
  let outcome: Outcome | undefined;
  let after: T | undefined;
  await sql
    .begin(async (tx) => {
      // An attack that gets past a permission check must not wait on locks held by other tests.
      await tx`set local statement_timeout = '5s'`;
      await tx`set local lock_timeout = '2s'`;
      try {
        const result = await tx.savepoint(async (sp) => {
          await sp`select set_config('role', ${attacker.role}, true), set_config('request.jwt.claims', ${claims}, true)`;
          return await statement(sp);
        });
        outcome = { refused: false, count: result.count, rows: [...result] };
      } catch (error) {
        const { code, message } = error as { code?: unknown; message?: string };
        if (typeof code !== 'string') throw error;
        outcome = { refused: true, code, message: message ?? '' };
      }
      await tx`reset role`;
      after = await inspect(tx);
      throw new Rollback();
    })
    .catch((error) => {
      if (!(error instanceof Rollback)) throw error;
    });
  return { outcome: outcome!, after: after! };
}

/** Refused for want of privilege (42501), or allowed and touching no row. */
export function refusedOrNoRows(outcome: Outcome): boolean {
  return outcome.refused ? outcome.code === '42501' : outcome.count === 0;
}

export function describeOutcome(outcome: Outcome): string {
  return outcome.refused ? `refused ${outcome.code} (${outcome.message})` : `allowed, ${outcome.count} row(s)`;
}
