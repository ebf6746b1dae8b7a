import type { ElevatedSql, Tx } from '../../plugins/db.ts';
import type { DayRange } from './schemas.ts';

// One query per function, named after what it returns. Reads come from the
// per-day rollups (migration 20261121000510; docs/analytics.md shows why
// each is exact over any range of days) and take the transaction of
// `app.db.asActor`, so row-level security decides.

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
  createdAt: Date;
}

/**
 * Elevated: one multi-row INSERT for a whole batch, the rows sent as one JSON
 * array (V8's JSON.stringify is the cheapest encoder at hand); the rollup
 * trigger runs in the same statement. Rows for websites that do not exist
 * are skipped, and the ids returned are the ones stored.
 */
export async function insertEventBatchElevated(sql: ElevatedSql, rows: EventRow[]): Promise<Set<string>> {
  const stored = await sql<{ id: string }[]>`
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
     where exists (select 1 from public.websites w where w.id = e."websiteId")
    returning id`;
  return new Set(stored.map((row) => row.id));
}

export interface DailyTotals {
  pageViews: number;
  loadTimeSum: number;
  loadTimeCount: number;
}

export async function getDailyTotals(tx: Tx, { websiteId, startDate, endDate }: DayRange): Promise<DailyTotals> {
  const [row] = await tx<{ page_views: string; load_time_sum: string; load_time_count: string }[]>`
    select coalesce(sum(page_views), 0) as page_views,
           coalesce(sum(load_time_sum), 0) as load_time_sum,
           coalesce(sum(load_time_count), 0) as load_time_count
      from public.analytics_daily_totals
     where website_id = ${websiteId} and day between ${startDate}::date and ${endDate}::date`;
  return { pageViews: Number(row.page_views), loadTimeSum: Number(row.load_time_sum), loadTimeCount: Number(row.load_time_count) };
}

/** Visitors are counted on their first day inside the range: the day whose previous day is before it. */
export async function getUniqueVisitorCount(tx: Tx, { websiteId, startDate, endDate }: DayRange): Promise<number> {
  const [row] = await tx<{ visitors: string }[]>`
    select coalesce(sum(members), 0) as visitors
      from public.analytics_daily_distinct
     where website_id = ${websiteId} and kind = 'visitor'
       and day between ${startDate}::date and ${endDate}::date and prev_day < ${startDate}::date`;
  return Number(row.visitors);
}

export interface SessionTotals {
  sessions: number;
  bounces: number;
  /** Sum over sessions of last minus first event inside the range. */
  durationMs: number;
}

/**
 * A session's first event in the range is on its day with prev_day before
 * the range, its last on its day with next_day after it; it bounced when
 * that is one and the same day holding a single page view.
 */
export async function getSessionTotals(tx: Tx, { websiteId, startDate, endDate }: DayRange): Promise<SessionTotals> {
  const [row] = await tx<{ sessions: string; bounces: string; duration_ms: string }[]>`
    with range_rows as (
      select *, extract(epoch from day::timestamp) * 1000 as midnight_ms,
             prev_day < ${startDate}::date as opens, next_day > ${endDate}::date as closes
        from public.analytics_daily_sessions
       where website_id = ${websiteId} and day between ${startDate}::date and ${endDate}::date
    )
    select coalesce(sum(sessions) filter (where opens), 0) as sessions,
           coalesce(sum(bounces) filter (where opens and closes), 0) as bounces,
           coalesce(sum(sessions * midnight_ms + last_offset_ms) filter (where closes), 0)
             - coalesce(sum(sessions * midnight_ms + first_offset_ms) filter (where opens), 0) as duration_ms
      from range_rows`;
  return { sessions: Number(row.sessions), bounces: Number(row.bounces), durationMs: Number(row.duration_ms) };
}

export async function getTopPages(tx: Tx, { websiteId, startDate, endDate }: DayRange, limit: number) {
  const rows = await tx<{ page: string; views: string }[]>`
    select page, sum(views) as views
      from public.analytics_daily_pages
     where website_id = ${websiteId} and day between ${startDate}::date and ${endDate}::date
     group by page
     order by sum(views) desc, page asc
     limit ${limit}`;
  return rows.map((row) => ({ page: row.page, views: Number(row.views) }));
}

export async function getTopReferrers(tx: Tx, { websiteId, startDate, endDate }: DayRange, limit: number) {
  const rows = await tx<{ source: string; count: string }[]>`
    select source, sum(events) as count
      from public.analytics_daily_referrers
     where website_id = ${websiteId} and day between ${startDate}::date and ${endDate}::date
     group by source
     order by sum(events) desc, source asc
     limit ${limit}`;
  return rows.map((row) => ({ source: row.source, count: Number(row.count) }));
}

/** Distinct sessions per device type (a session seen on two device types counts for both). */
export async function getDeviceSessionCounts(tx: Tx, { websiteId, startDate, endDate }: DayRange) {
  const rows = await tx<{ type: 'desktop' | 'mobile' | 'tablet'; count: string }[]>`
    select kind as type, sum(members) as count
      from public.analytics_daily_distinct
     where website_id = ${websiteId} and kind in ('desktop', 'mobile', 'tablet')
       and day between ${startDate}::date and ${endDate}::date and prev_day < ${startDate}::date
     group by kind
    having sum(members) > 0
     order by sum(members) desc, kind asc`;
  return rows.map((row) => ({ type: row.type, count: Number(row.count) }));
}

/** One row per day of the range, zero days included; a query to await or to read through a cursor (exports). */
export function selectDailySeries(tx: Tx, { websiteId, startDate, endDate }: DayRange) {
  return tx<{ date: string; page_views: string; unique_visitors: string; sessions: string }[]>`
    select to_char(d.day, 'YYYY-MM-DD') as date,
           coalesce(t.page_views, 0) as page_views,
           coalesce(v.visitors, 0) as unique_visitors,
           coalesce(s.sessions, 0) as sessions
      from (select g::date as day
              from generate_series(${startDate}::timestamp, ${endDate}::timestamp, interval '1 day') as g) as d
      left join public.analytics_daily_totals t on t.website_id = ${websiteId} and t.day = d.day
      left join (
        select day, sum(members) as visitors from public.analytics_daily_distinct
         where website_id = ${websiteId} and kind = 'visitor' and day between ${startDate}::date and ${endDate}::date
         group by day
      ) v on v.day = d.day
      left join (
        select day, sum(sessions) as sessions from public.analytics_daily_sessions
         where website_id = ${websiteId} and day between ${startDate}::date and ${endDate}::date
         group by day
      ) s on s.day = d.day
     order by d.day`;
}

export type DailySeriesRow = Awaited<ReturnType<typeof selectDailySeries>>[number];

export const toDailySeriesDay = (row: DailySeriesRow) => ({
  date: row.date,
  pageViews: Number(row.page_views),
  uniqueVisitors: Number(row.unique_visitors),
  sessions: Number(row.sessions),
});

export async function getDailySeries(tx: Tx, range: DayRange) {
  return (await selectDailySeries(tx, range)).map(toDailySeriesDay);
}
