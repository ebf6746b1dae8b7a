import type { FastifyBaseLogger } from 'fastify';
import type { Caller } from '../../../plugins/auth.ts';
import { type Database, ELEVATED_ACTOR } from '../../../plugins/db.ts';
import { userIdOf } from '../../../plugins/request-log.ts';
import { websiteNotFound } from '../service.ts';
import { eraseAnalyticsPerson } from './queries.ts';
import type { ErasureBody, ErasureCounts } from './schemas.ts';

/** Erasing one person's analytics on one website; the route checks the caller's role first. */
export function createErasureService({ db }: { db: Database }) {
  return {
    /** The counts of what changed, or would for a dry run (all 0 for a person unknown or already erased); 404 for a website not there. */
    async erasePerson(caller: Caller, websiteId: string, person: ErasureBody, log: FastifyBaseLogger): Promise<ErasureCounts> {
      const counts = await db.writeAtOnceAsActor(ELEVATED_ACTOR, (tx) => eraseAnalyticsPerson(tx, websiteId, person));
      if (!counts) throw websiteNotFound();
      // Who and which website, and how much: never the person's ids, which the erasure exists to remove.
      const erasedBy = userIdOf(caller);
      if (person.dryRun) log.info({ websiteId, countedBy: erasedBy, ...counts }, 'analytics of one person counted for erasure (dry run)');
      else log.info({ websiteId, erasedBy, ...counts }, 'analytics of one person erased');
      return counts;
    },
  };
}
