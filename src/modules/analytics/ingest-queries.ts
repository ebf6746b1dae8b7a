import type { ElevatedSql } from '../../plugins/db.ts';

// The write path of ingestion: the batcher's one statement per batch.

/** An event as the batcher stores it. */
export interface EventRow {
  id: string;
  websiteId: string;
  eventType: string;
  page: string;
  referrer: string | null;
  referrerHost: string | null;
  userAgent: string;
  deviceType: string;
  sessionId: string;
  userId: string | null;
  visitorId: string;
  country: string | null;
  utmSource: string | null;
  utmMedium: string | null;
  utmCampaign: string | null;
  metadata: Record<string, unknown>;
  /**
   * ISO 8601 text, as the reply carries it: a Date in the rows would take
   * JSON.stringify off its fast path (it calls toJSON on each), which made the
   * batch's encoding about twice as slow (docs/performance.md).
   */
  createdAt: string;
}

/**
 * Elevated: one multi-row INSERT for a whole batch, the rows sent as one JSON
 * array (V8's JSON.stringify is the cheapest encoder at hand); the rollup
 * trigger runs in the same statement. Rows for websites that do not exist
 * (or whose deletion has begun) are skipped, and the ids returned are the ones stored. Pending, so the
 * batcher can bound it (db.bounded).
 */
export function insertEventBatchQueryElevated(sql: ElevatedSql, rows: EventRow[]) {
  return sql<{ id: string }[]>`
    insert into public.analytics_events
      (id, website_id, event_type, page, referrer, referrer_host, user_agent, device_type,
       session_id, user_id, visitor_id, country, utm_source, utm_medium, utm_campaign, metadata, created_at)
    select e.id, e."websiteId", e."eventType", e.page, e.referrer, e."referrerHost", e."userAgent", e."deviceType",
           e."sessionId", e."userId", e."visitorId", e.country, e."utmSource", e."utmMedium", e."utmCampaign",
           e.metadata, e."createdAt"
      from jsonb_to_recordset(${JSON.stringify(rows)}::text::jsonb) as e (
        id uuid, "websiteId" uuid, "eventType" text, page text, referrer text, "referrerHost" text, "userAgent" text,
        "deviceType" text, "sessionId" text, "userId" text, "visitorId" text, country text, "utmSource" text,
        "utmMedium" text, "utmCampaign" text, metadata jsonb, "createdAt" timestamptz)
     where exists (select 1 from public.websites w where w.id = e."websiteId" and w.deletion_started_at is null)
    returning id`;
}

/** The ids of the rows the batch stored. */
export function storedIds(rows: readonly { id: string }[]): Set<string> {
  return new Set(rows.map((row) => row.id));
}

/** Elevated: insertEventBatchQueryElevated, awaited; the ids stored. */
export async function insertEventBatchElevated(sql: ElevatedSql, rows: EventRow[]): Promise<Set<string>> {
  return storedIds(await insertEventBatchQueryElevated(sql, rows));
}
