import type { ServerLogEntry } from '../../lib/log-sink.ts';
import type { ElevatedSql, Tx } from '../../plugins/db.ts';
import type { CreateLogBody, ListLogsQuery, LogEntry } from './schemas.ts';

// Every statement on public.app_logs. Reads and client entries run in the
// caller's transaction: RLS lets admins read them and store client entries in
// their own name. The server's own entries and the retention are elevated.

interface LogRow {
  id: string;
  level: LogEntry['level'];
  message: string;
  context: Record<string, unknown>;
  source: LogEntry['source'];
  request_id: string | null;
  user_id: string | null;
  created_at: Date;
  total: string;
}

export async function listLogEntries(tx: Tx, { level, source, since, limit, offset }: ListLogsQuery): Promise<{ entries: LogEntry[]; total: number }> {
  const where = () => tx`
    where (${level ?? null}::public.log_level is null or level = ${level ?? null}::public.log_level)
      and (${source ?? null}::public.log_source is null or source = ${source ?? null}::public.log_source)
      and (${since ?? null}::timestamptz is null or created_at >= ${since ?? null}::timestamptz)`;
  const rows = await tx<LogRow[]>`
    select id::text, level::text, message, context, source::text, request_id, user_id, created_at, count(*) over () as total
      from public.app_logs ${where()}
     order by created_at desc, id desc
     limit ${limit} offset ${offset}`;
  let total = rows.length > 0 ? Number(rows[0].total) : 0;
  if (rows.length === 0 && offset > 0) {
    const [row] = await tx<{ total: string }[]>`select count(*) as total from public.app_logs ${where()}`;
    total = Number(row.total);
  }
  const entries = rows.map((row) => ({
    id: row.id,
    level: row.level,
    message: row.message,
    context: row.context,
    source: row.source,
    requestId: row.request_id,
    userId: row.user_id,
    createdAt: row.created_at.toISOString(),
  }));
  return { entries, total };
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

/** Elevated: retention applies to every entry, whoever wrote it; returns how many went. */
export async function deleteLogEntriesOlderThanElevated(sql: ElevatedSql, days: number): Promise<number> {
  const result = await sql`delete from public.app_logs where created_at < now() - make_interval(days => ${days})`;
  return result.count;
}
