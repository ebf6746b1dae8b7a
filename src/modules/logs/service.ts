import type { ServerLogEntry } from '../../lib/log-sink.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database } from '../../plugins/db.ts';
import {
  countLogEntries,
  deleteLogEntriesBeforeElevated,
  insertClientLogEntry,
  insertServerLogEntriesElevated,
  listLogEntries,
} from './queries.ts';
import type { CreateLogBody, ListLogsQuery, LogEntry } from './schemas.ts';

// Stored log entries: admins read them and store their clients' entries as
// themselves; the server's own entries and the retention run elevated.

const DAY_MS = 24 * 60 * 60_000;

export interface PruneOptions {
  /** Entries deleted per statement (worker.ts says why its default is what it is). */
  batchSize: number;
  /** Checked between batches: stop early (the app is closing). */
  stopped?: () => boolean;
}

export function createLogsService({ db }: { db: Database }) {
  /** The page and the total in one round trip; each reads only what it needs. */
  async function listEntries(caller: Caller, query: ListLogsQuery): Promise<{ entries: LogEntry[]; total: number }> {
    return db.readAtOnceAsActor(dbActorOf(caller), async (tx) => {
      const [total, entries] = await Promise.all([countLogEntries(tx, query), listLogEntries(tx, query, query)]);
      return { entries, total };
    });
  }

  /** Stored in the caller's name; the legacy admin token has no auth.users row, so no user id. */
  async function storeClientEntry(caller: Caller, body: CreateLogBody, requestId: string) {
    const userId = caller.kind === 'user' ? caller.userId : null;
    return db.writeAtOnceAsActor(dbActorOf(caller), (tx) => insertClientLogEntry(tx, body, { userId, requestId }));
  }

  function storeServerEntriesElevated(entries: ServerLogEntry[]): Promise<void> {
    return insertServerLogEntriesElevated(db.sql, entries);
  }

  /**
   * Deletes entries older than `retentionDays`, batch by batch, each batch its
   * own statement under the statement timeout; returns how many went. One
   * cutoff for the whole run, so it ends even while new entries keep expiring.
   */
  async function pruneEntriesElevated(retentionDays: number, { batchSize, stopped = () => false }: PruneOptions): Promise<number> {
    const cutoff = new Date(Date.now() - retentionDays * DAY_MS);
    let total = 0;
    while (!stopped()) {
      const deleted = await deleteLogEntriesBeforeElevated(db.sql, cutoff, batchSize);
      total += deleted;
      if (deleted < batchSize) break;
    }
    return total;
  }

  return { listEntries, storeClientEntry, storeServerEntriesElevated, pruneEntriesElevated };
}
