import type { ServerLogEntry } from '../../lib/log-sink.ts';
import type { ElevatedSql, Tx } from '../../plugins/db.ts';
import type { CreateLogBody, ListLogsQuery, LogEntry } from './schemas.ts';

// Every statement on public.app_logs. Reads and client entries run in the
// caller's transaction: RLS lets admins read them and store client entries in
// their own name. The server's own entries and the retention are elevated.

interface LogRow {
  id_text: string;
  level: LogEntry['level'];
  message: string;
  context: Record<string, unknown>;
  source: LogEntry['source'];
  request_id: string | null;
  user_id: string | null;
  created_at: Date;
}

type LogFilter = Pick<ListLogsQuery, 'level' | 'source' | 'since'>;

/**
 * Only the conditions asked for, so each combination is a prepared statement
 * of its own that Postgres plans for what it asks: with one statement for all
 * (`$1 is null or level = $1`), the generic plan it settles on after five runs
 * cannot use the (level, created_at) index.
 */
function where(tx: Tx, { level, source, since }: LogFilter) {
  const byLevel = level === undefined ? tx`` : tx`and level = ${level}::public.log_level`;
  const bySource = source === undefined ? tx`` : tx`and source = ${source}::public.log_source`;
  const bySince = since === undefined ? tx`` : tx`and created_at >= ${since}::timestamptz`;
  return tx`where true ${byLevel} ${bySource} ${bySince}`;
}

/** How many entries match, for the page's total: a query of its own, so a page reads only its own rows. */
export async function countLogEntries(tx: Tx, filter: LogFilter): Promise<number> {
  const [row] = await tx<{ total: number }[]>`select count(*)::int as total from public.app_logs ${where(tx, filter)}`;
  return row.total;
}

/**
 * A page of entries, newest first (id breaks ties so pages never overlap).
 * The id's text has a name of its own: as `id`, the ORDER BY would sort by
 * the text column ('9' after '10'), not the bigint.
 */
export async function listLogEntries(tx: Tx, filter: LogFilter, page: { limit: number; offset: number }): Promise<LogEntry[]> {
  const rows = await tx<LogRow[]>`
    select id::text as id_text, level::text, message, context, source::text, request_id, user_id, created_at
      from public.app_logs ${where(tx, filter)}
     order by created_at desc, id desc
     limit ${page.limit} offset ${page.offset}`;
  return rows.map((row) => ({
    id: row.id_text,
    level: row.level,
    message: row.message,
    context: row.context,
    source: row.source,
    requestId: row.request_id,
    userId: row.user_id,
    createdAt: row.created_at.toISOString(),
  }));
}

/** A client's entry; `userId` is the admin who sent it, null for the legacy admin token (no auth.users row). */
export async function insertClientLogEntry(
  tx: Tx,
  { level, message, context }: CreateLogBody,
  { userId, requestId }: { userId: string | null; requestId: string },
): Promise<{ id: string; createdAt: string }> {
  const [row] = await tx<{ id: string; created_at: Date }[]>`
    insert into public.app_logs (level, message, context, source, request_id, user_id)
    values (${level}::public.log_level, ${message}, ${JSON.stringify(context ?? {})}::text::jsonb, 'client', ${requestId}, ${userId})
    returning id::text, created_at`;
  return { id: row.id, createdAt: row.created_at.toISOString() };
}

/** Elevated (the server's own entries have no caller): a batch in one statement. */
export async function insertServerLogEntriesElevated(sql: ElevatedSql, entries: ServerLogEntry[]): Promise<void> {
  const rows = entries.map((e) => ({ level: e.level, message: e.message, context: e.context, request_id: e.requestId, created_at: e.createdAt }));
  await sql`
    insert into public.app_logs (level, message, context, source, request_id, created_at)
    select r.level::public.log_level, r.message, r.context, 'server', r.request_id, r.created_at
      from jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb)
        as r(level text, message text, context jsonb, request_id text, created_at timestamptz)`;
}

/**
 * Elevated: retention applies to every entry, whoever wrote it. Deletes at
 * most `batchSize` of the oldest entries created before `cutoff`, as one short
 * statement of its own; returns how many went. The ids are picked through the
 * created_at index and handed over as an array: as `id in (select …)`, past
 * about 10 000 ids Postgres joined them against a scan of the whole table.
 */
export async function deleteLogEntriesBeforeElevated(sql: ElevatedSql, cutoff: Date, batchSize: number): Promise<number> {
  const result = await sql`
    delete from public.app_logs
     where id = any (array(
       select id from public.app_logs
        where created_at < ${cutoff}::timestamptz
        order by created_at
        limit ${batchSize}))`;
  return result.count;
}
