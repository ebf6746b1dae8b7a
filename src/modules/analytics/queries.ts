import type { Tx } from '../../plugins/db.ts';
import type { DayRange } from './schemas.ts';

// The reads: one query per function, named after what it returns (the write
// path is ingest-queries.ts). They come from the per-day rollups (migration
// 20261121000510; docs/analytics.md shows why each is exact over any range of
// days) and take the caller's transaction (`asActor`, or `readAtOnceAsActor`),
// so row-level security decides.

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

export interface DistinctCounts {
  /** Unique visitors in the range. */
  visitors: number;
  /** Distinct sessions per device type (a session seen on two device types counts for both); types without any left out. */
  devices: { type: 'desktop' | 'mobile' | 'tablet'; count: number }[];
}

/**
 * Unique visitors and sessions per device type: each kind of member is
 * counted on its first day inside the range, the day whose previous day is
 * before it. One statement for both, as they share a table: every statement
 * of a summary pays its own role lookup under row-level security.
 */
export async function getDistinctCounts(tx: Tx, { websiteId, startDate, endDate }: DayRange): Promise<DistinctCounts> {
  const rows = await tx<{ kind: 'visitor' | DistinctCounts['devices'][number]['type']; count: string }[]>`
    select kind, sum(members) as count
      from public.analytics_daily_distinct
     where website_id = ${websiteId} and kind in ('visitor', 'desktop', 'mobile', 'tablet')
       and day between ${startDate}::date and ${endDate}::date and prev_day < ${startDate}::date
     group by kind
    having sum(members) > 0
     order by sum(members) desc, kind asc`;
  let visitors = 0;
  const devices: DistinctCounts['devices'] = [];
  for (const row of rows) {
    if (row.kind === 'visitor') visitors = Number(row.count);
    else devices.push({ type: row.kind, count: Number(row.count) });
  }
  return { visitors, devices };
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

/** The daily rollups a top list is read from: what each groups by and what it sums. */
const TOP_LISTS = {
  pages: { table: 'public.analytics_daily_pages', key: 'page', measure: 'views' },
  referrers: { table: 'public.analytics_daily_referrers', key: 'source', measure: 'events' },
} as const;

/** The `limit` keys of a daily rollup with the largest sum over the range; ties by key. */
async function getTopList(tx: Tx, list: keyof typeof TOP_LISTS, { websiteId, startDate, endDate }: DayRange, limit: number) {
  const { table, key, measure } = TOP_LISTS[list];
  const rows = await tx<{ key: string; total: string }[]>`
    select ${tx(key)} as key, sum(${tx(measure)}) as total
      from ${tx(table)}
     where website_id = ${websiteId} and day between ${startDate}::date and ${endDate}::date
     group by 1
     order by 2 desc, 1 asc
     limit ${limit}`;
  return rows.map((row) => ({ key: row.key, total: Number(row.total) }));
}

export async function getTopPages(tx: Tx, range: DayRange, limit: number) {
  return (await getTopList(tx, 'pages', range, limit)).map(({ key, total }) => ({ page: key, views: total }));
}

export async function getTopReferrers(tx: Tx, range: DayRange, limit: number) {
  return (await getTopList(tx, 'referrers', range, limit)).map(({ key, total }) => ({ source: key, count: total }));
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
