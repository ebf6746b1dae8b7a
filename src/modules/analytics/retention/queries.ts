import type { ElevatedSql } from '../../../plugins/db.ts';

/**
 * Elevated (a service operation over every website): deletes at most
 * `batchSize` events created before `cutoff`, in one short transaction of
 * its own; returns how many (migration 20261122000200).
 */
export async function deleteEventsBeforeElevated(sql: ElevatedSql, cutoff: Date, batchSize: number): Promise<number> {
  const [row] = await sql<{ deleted: number }[]>`
    select public.delete_analytics_events_before(${cutoff}, ${batchSize}) as deleted`;
  return row.deleted;
}

/**
 * Elevated: deletes at most `batchSize` rollup member rows (visitor, session
 * and dimension days) of days before `cutoffDay` (YYYY-MM-DD), in one short
 * transaction of its own; returns how many (migration 20261129210101).
 */
export async function deleteMembersBeforeElevated(sql: ElevatedSql, cutoffDay: string, batchSize: number): Promise<number> {
  const [row] = await sql<{ deleted: number }[]>`
    select public.delete_analytics_members_before(${cutoffDay}::date, ${batchSize}) as deleted`;
  return row.deleted;
}
