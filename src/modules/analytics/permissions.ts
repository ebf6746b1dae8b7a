import { actorFor, type Caller } from '../../plugins/auth.ts';
import type { DbActor } from '../../plugins/db.ts';
import { canViewWebsites } from '../websites/permissions.ts';

// Who reads a website's analytics: viewers, editors and admins, for every
// website; or the website's own API key (X-API-Key), for that website only.

export type AnalyticsReader = { kind: 'api-key'; websiteId: string } | { kind: 'caller'; caller: Caller };

export function canViewWebsiteAnalytics(reader: AnalyticsReader, websiteId: string): boolean {
  if (reader.kind === 'api-key') return reader.websiteId === websiteId;
  return canViewWebsites(reader.caller);
}

/**
 * Role holders read under row-level security. A key has no database user:
 * having checked that it belongs to the website, its reads are elevated.
 */
export function readerActor(reader: AnalyticsReader): DbActor {
  return reader.kind === 'api-key' ? { role: 'service_role' } : actorFor(reader.caller);
}
