import type { ServerLogEntry } from '../../lib/log-sink.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database } from '../../plugins/db.ts';
import {
  deleteLogEntriesOlderThanElevated,
  insertClientLogEntry,
  insertServerLogEntriesElevated,
  listLogEntries,
} from './queries.ts';
import type { CreateLogBody, ListLogsQuery, LogEntry } from './schemas.ts';

// Stored log entries: admins read them and store their clients' entries as
// themselves; the server's own entries and the retention run elevated.

export function createLogsService({ db }: { db: Database }) {
  async function listEntries(caller: Caller, query: ListLogsQuery): Promise<{ entries: LogEntry[]; total: number }> {
    return db.asActor(dbActorOf(caller), (tx) => listLogEntries(tx, query));
  }

  /** Stored in the caller's name; the legacy admin token has no auth.users row, so no user id. */
  async function storeClientEntry(caller: Caller, body: CreateLogBody, requestId: string) {
    const userId = caller.kind === 'user' ? caller.userId : null;
    return db.asActor(dbActorOf(caller), (tx) => insertClientLogEntry(tx, body, { userId, requestId }));
  }

  function storeServerEntriesElevated(entries: ServerLogEntry[]): Promise<void> {
    return insertServerLogEntriesElevated(db.sql, entries);
  }

  function pruneEntriesElevated(retentionDays: number): Promise<number> {
    return deleteLogEntriesOlderThanElevated(db.sql, retentionDays);
  }

  return { listEntries, storeClientEntry, storeServerEntriesElevated, pruneEntriesElevated };
}
