import type postgres from 'postgres';

// Seeds analytics events for the benchmark in Postgres itself (generate_series,
// no data over the wire), through the same INSERT path as ingestion, so the
// rollup trigger maintains the rollups exactly as it does in production.
//
// Shape of the data: the events are spread evenly from midnight UTC 29 days
// ago until now (the default "last 30 days"); most sessions are 5
// consecutive events, a quarter are single events (bounces when a page
// view); 80% page views, pages skewed towards a few of 500, a referrer on 60%
// of session starts, load times on 30% of events, device types 60/30/10 per
// session, and each visitor comes back for about 1.5 sessions over the month.

export interface SeedOptions {
  websiteId: string;
  events: number;
  /** Rows per INSERT statement (one rollup-trigger run each). */
  chunk?: number;
  onProgress?: (done: number) => void;
}

export async function seedEvents(sql: postgres.Sql, { websiteId, events, chunk = 500_000, onProgress }: SeedOptions) {
  const visitors = Math.max(1, Math.floor(events / 7.5));
  const [{ start, span_ms: spanMs }] = await sql<{ start: Date; span_ms: number }[]>`
    select date_trunc('day', now() at time zone 'UTC') at time zone 'UTC' - interval '29 days' as start,
           (extract(epoch from now() - (date_trunc('day', now() at time zone 'UTC') at time zone 'UTC' - interval '29 days')) * 1000 - 1000)::float8 as span_ms`;
  for (let from = 0; from < events; from += chunk) {
    const to = Math.min(events, from + chunk);
    await sql.begin(async (tx) => {
      // Seed only: bulk loading wants memory for its group-bys; acknowledged
      // ingestion keeps synchronous commit.
      await tx`set local work_mem = '256MB'`;
      await tx`set local synchronous_commit = off`;
      await tx`
        insert into public.analytics_events
          (id, website_id, event_type, page, referrer, referrer_host, user_agent, device_type,
           session_id, user_id, visitor_id, metadata, created_at)
        select gen_random_uuid(), ${websiteId},
               case when r1 < 0.80 then 'page_view' when r1 < 0.92 then 'click' when r1 < 0.97 then 'custom' else 'form_submit' end,
               '/page/' || floor(power(r2, 3) * 500)::int,
               case when host is null then null else 'https://' || host || '/' end,
               host,
               'bench-agent',
               case when s % 10 < 6 then 'desktop' when s % 10 < 9 then 'mobile' else 'tablet' end,
               case when s % 4 = 0 then 'session-' || s || '-' || i % 5 else 'session-' || s end,
               null, 'visitor-' || (s % ${visitors}),
               case when r1 < 0.30 then jsonb_build_object('loadTime', 100 + floor(r2 * 2000)::int) else '{}'::jsonb end,
               ${start}::timestamptz + (i::float8 / ${events}) * ${spanMs}::float8 * interval '1 millisecond'
          from (select i, i / 5 as s, random() as r1, random() as r2, random() as r3
                  from generate_series(${from}::bigint, ${to - 1}::bigint) as i) as g,
               lateral (select case when i % 5 <> 0 or r3 < 0.4 then null
                                    when r3 < 0.7 then 'google.com' when r3 < 0.8 then 'news.ycombinator.com'
                                    when r3 < 0.88 then 'twitter.com' when r3 < 0.94 then 'github.com'
                                    else 'site' || floor(r3 * 1000)::int || '.example' end as host) as h`;
    });
    onProgress?.(to);
  }
  await sql`vacuum analyze public.analytics_daily_totals, public.analytics_daily_pages, public.analytics_daily_referrers,
                          public.analytics_daily_distinct, public.analytics_daily_sessions`;
}
