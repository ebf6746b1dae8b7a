import type postgres from 'postgres';
import { getDailyTopCountries, getTopDimensionValues } from '../../src/modules/analytics/dimension-queries.ts';
import {
  getDailySeries,
  getDailyTotals,
  getDistinctCounts,
  getSessionTotals,
  getTopPages,
  getTopReferrers,
} from '../../src/modules/analytics/queries.ts';
import type { DayRange } from '../../src/modules/analytics/schemas.ts';

// Every metric of a range two ways: from the raw events, straight from its
// definition in docs/analytics.md (`reference`), and from the rollups the API
// reads (`fromRollups`). tests/analytics-rollups.test.ts and
// tests/analytics-erasure.test.ts compare the two.

/** The ten values of an event column with the most distinct visitors (ties by value), as JSON, over `ev`. */
function topByVisitors(tx: postgres.TransactionSql, column: 'country' | 'utm_source' | 'utm_medium' | 'utm_campaign') {
  return tx`
    (select coalesce(json_agg(json_build_object('value', value, 'visitors', n) order by n desc, value), '[]')
       from (select ${tx(column)} as value, count(distinct visitor_id)::int as n from ev where ${tx(column)} is not null
              group by 1 order by n desc, value limit 10) top)`;
}

/** Every metric from the raw events, by definition; `events` names another table of events' shape (a reference the test built). */
export async function reference(tx: postgres.TransactionSql, { websiteId, startDate, endDate }: DayRange, events = 'public.analytics_events') {
  const [row] = await tx`
    with ev as (
      select * from ${tx(events)}
       where website_id = ${websiteId}
         and created_at >= (${startDate}::date)::timestamp at time zone 'UTC'
         and created_at < (${endDate}::date + 1)::timestamp at time zone 'UTC'
    ),
    sessions as (
      select session_id, min(created_at) as first_at, max(created_at) as last_at, count(*) as events,
             count(*) filter (where event_type = 'page_view') as page_views
        from ev group by session_id
    )
    select
      (select count(*)::int from ev where event_type = 'page_view') as page_views,
      (select count(distinct visitor_id)::int from ev) as visitors,
      (select count(*)::int from sessions) as sessions,
      (select count(*)::int from sessions where events = 1 and page_views = 1) as bounces,
      (select coalesce(round(sum(extract(epoch from last_at - first_at)) * 1000), 0)::float8 from sessions) as duration_ms,
      (select coalesce(sum((metadata ->> 'loadTime')::numeric), 0)::float8 from ev where jsonb_typeof(metadata -> 'loadTime') = 'number') as load_time_sum,
      (select count(*)::int from ev where jsonb_typeof(metadata -> 'loadTime') = 'number') as load_time_count,
      (select coalesce(json_agg(json_build_object('page', page, 'views', views) order by views desc, page), '[]')
         from (select page, count(*)::int as views from ev where event_type = 'page_view'
                group by page order by views desc, page limit 10) p) as top_pages,
      (select coalesce(json_agg(json_build_object('source', source, 'count', n) order by n desc, source), '[]')
         from (select referrer_host as source, count(*)::int as n from ev where referrer_host is not null
                group by 1 order by n desc, source limit 10) r) as referrers,
      (select coalesce(json_agg(json_build_object('type', device_type, 'count', n) order by n desc, device_type), '[]')
         from (select device_type, count(distinct session_id)::int as n from ev group by 1) d) as devices,
      (select json_agg(json_build_object('date', to_char(day, 'YYYY-MM-DD'), 'pageViews', pv, 'uniqueVisitors', v, 'sessions', s) order by day)
         from (select g::date as day,
                      (select count(*) from ev where event_type = 'page_view' and (created_at at time zone 'UTC')::date = g::date)::int as pv,
                      (select count(distinct visitor_id) from ev where (created_at at time zone 'UTC')::date = g::date)::int as v,
                      (select count(distinct session_id) from ev where (created_at at time zone 'UTC')::date = g::date)::int as s
                 from generate_series(${startDate}::timestamp, ${endDate}::timestamp, interval '1 day') g) days) as series,
      ${topByVisitors(tx, 'country')} as countries,
      ${topByVisitors(tx, 'utm_source')} as utm_sources,
      ${topByVisitors(tx, 'utm_medium')} as utm_mediums,
      ${topByVisitors(tx, 'utm_campaign')} as utm_campaigns,
      (select coalesce(json_object_agg(date, list), '{}')
         from (select to_char(day, 'YYYY-MM-DD') as date,
                      json_agg(json_build_object('country', country, 'visitors', n) order by n desc, country) as list
                 from (select (created_at at time zone 'UTC')::date as day, country, count(distinct visitor_id)::int as n
                         from ev where country is not null group by 1, 2) per_day
                group by day) days) as daily_countries`;
  return row;
}

export async function fromRollups(tx: postgres.TransactionSql, range: DayRange) {
  const [totals, distinct, sessions, topPages, referrers, series, dimensions, dailyCountries] = await Promise.all([
    getDailyTotals(tx, range),
    getDistinctCounts(tx, range),
    getSessionTotals(tx, range),
    getTopPages(tx, range, 10),
    getTopReferrers(tx, range, 10),
    getDailySeries(tx, range),
    getTopDimensionValues(tx, range, 10),
    getDailyTopCountries(tx, range, 10),
  ]);
  return {
    page_views: totals.pageViews,
    visitors: distinct.visitors,
    sessions: sessions.sessions,
    bounces: sessions.bounces,
    duration_ms: sessions.durationMs,
    load_time_sum: totals.loadTimeSum,
    load_time_count: totals.loadTimeCount,
    top_pages: topPages,
    referrers,
    devices: distinct.devices,
    series,
    countries: dimensions.country,
    utm_sources: dimensions.utm_source,
    utm_mediums: dimensions.utm_medium,
    utm_campaigns: dimensions.utm_campaign,
    daily_countries: Object.fromEntries(dailyCountries),
  };
}
