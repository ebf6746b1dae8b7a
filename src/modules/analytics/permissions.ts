import { WEBSITE_READERS } from '../../lib/roles.ts';
import { type Caller, dbActorOf, hasAnyRole } from '../../plugins/auth.ts';
import { type DbActor, ELEVATED_ACTOR } from '../../plugins/db.ts';

// Who reads a website's analytics: viewers, editors and admins, for every
// website; or the website's own API key (X-API-Key), for that website only.

/** Who called an analytics read route: a signed-in caller, or a website's API key. */
export type AnalyticsCaller = Caller | { kind: 'api-key'; websiteId: string };

export function canViewWebsiteAnalytics(caller: AnalyticsCaller, websiteId: string): boolean {
  if (caller.kind === 'api-key') return caller.websiteId === websiteId;
  return hasAnyRole(caller, WEBSITE_READERS);
}

/**
 * Role holders read under row-level security. A key has no database user:
 * having checked that it belongs to the website, its reads are elevated.
 */
export function analyticsDbActorOf(caller: AnalyticsCaller): DbActor {
  return caller.kind === 'api-key' ? ELEVATED_ACTOR : dbActorOf(caller);
}
