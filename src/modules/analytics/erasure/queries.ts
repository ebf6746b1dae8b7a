import type { Tx } from '../../../plugins/db.ts';
import type { ErasureBody, ErasureCounts } from './schemas.ts';

/**
 * Erases one person's analytics on one website, in one transaction under the
 * website's rollup lock (migration 20261130024000), or for a dry run counts
 * what it would erase, without a lock and changing nothing. Only service_role
 * may call the function: run it as the elevated actor, once the caller's role
 * is checked. Undefined when the website is not there (never was, or its
 * deletion has begun).
 */
export async function eraseAnalyticsPerson(tx: Tx, websiteId: string, person: ErasureBody): Promise<ErasureCounts | undefined> {
  const [row] = await tx<ErasureCounts[]>`
    select events, visitors, sessions, member_rows as "memberRows"
      from public.erase_analytics_person(${websiteId}, ${person.userId ?? null}, ${person.visitorId ?? null}, ${person.sessionId ?? null}, ${person.dryRun ?? false})`;
  return row;
}
