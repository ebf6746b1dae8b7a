-- The rollups' member rows (visitor ids, session ids, a session's first and
-- last event) may now be deleted past retention (next migration), and the
-- two rollup triggers must then leave the figures of the remaining days as
-- they were.
--
-- They relinked every touched member with lag(day) / lead(day) over its
-- rows, the earliest getting -infinity. Once some of a member's old rows are
-- gone, a remaining row still names, as prev_day (or a session's next_day),
-- a day whose row is gone: relinking over the remaining rows alone would move
-- it to -infinity, or past the gap, on the member's next event, and change
-- the daily totals of old ranges. Retention deletes in batches of rows, not
-- members, so a member may for a while keep an old row on both sides of a
-- deleted one.
--
-- So the relinking now also counts the days the member's stored rows name
-- (their prev_day and next_day): each is a day the member was seen, and the
-- day next to a deleted one is always named by its neighbour. A row's
-- previous day is the latest day before it, seen or named; its next day the
-- earliest after it. That gives what the deleted rows would have given, for
-- every day that arrives after the cut-off (events are stamped on arrival,
-- and the cut-off is months back). A member none of whose rows remain starts
-- over from -infinity; docs/analytics.md ("Retention") says why no range the
-- API accepts can see that. Range frames (`'1 day' preceding`) skip a named
-- day equal to the row's own. The rest of both functions is unchanged.

create or replace function public.apply_analytics_rollups()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  -- The relinking reads a member's other days, so writers of one website take
  -- turns (in website order: no deadlocks) and each statement below sees the
  -- previous writer's rows; that needs READ COMMITTED's per-statement snapshot.
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'analytics events must be inserted under READ COMMITTED'
      using errcode = '25001';
  end if;
  perform pg_advisory_xact_lock(hashtext('public.apply_analytics_rollups'), website_key)
     from (select distinct hashtext(website_id::text) as website_key from inserted order by 1) as websites;

  insert into public.analytics_daily_totals as t (website_id, day, events, page_views, load_time_sum, load_time_count)
  select website_id, (created_at at time zone 'UTC')::date, count(*),
         count(*) filter (where event_type = 'page_view'),
         coalesce(sum(case when jsonb_typeof(metadata -> 'loadTime') = 'number' then (metadata ->> 'loadTime')::numeric end), 0),
         count(*) filter (where jsonb_typeof(metadata -> 'loadTime') = 'number')
    from inserted
   group by 1, 2
   order by 1, 2
  on conflict (website_id, day) do update
     set events = t.events + excluded.events,
         page_views = t.page_views + excluded.page_views,
         load_time_sum = t.load_time_sum + excluded.load_time_sum,
         load_time_count = t.load_time_count + excluded.load_time_count;

  insert into public.analytics_daily_pages as t (website_id, day, page, views)
  select website_id, (created_at at time zone 'UTC')::date, page, count(*)
    from inserted
   where event_type = 'page_view'
   group by 1, 2, 3
   order by 1, 2, 3
  on conflict (website_id, day, page) do update set views = t.views + excluded.views;

  insert into public.analytics_daily_referrers as t (website_id, day, source, events)
  select website_id, (created_at at time zone 'UTC')::date, referrer_host, count(*)
    from inserted
   where referrer_host is not null
   group by 1, 2, 3
   order by 1, 2, 3
  on conflict (website_id, day, source) do update set events = t.events + excluded.events;

  -- Visitors, and sessions per device type: member days with prev_day.
  with candidates as (
    select distinct website_id, kind, member, day
      from inserted,
           lateral (values ('visitor', visitor_id), (device_type, session_id)) as m (kind, member),
           lateral (select (created_at at time zone 'UTC')::date as day) as d
  ),
  fresh as (
    select c.* from candidates c
      left join lateral (
        select true as seen from public.analytics_distinct_days d
         where d.website_id = c.website_id and d.kind = c.kind and d.member = c.member and d.day = c.day
         limit 1) as known on true
     where known.seen is null
  ),
  touched as (select distinct website_id, kind, member from fresh),
  merged as (
    select t.website_id, t.kind, t.member, d.day, d.prev_day as old_prev, false as is_new
      from touched t
     cross join lateral (
       select day, prev_day from public.analytics_distinct_days d
        where d.website_id = t.website_id and d.kind = t.kind and d.member = t.member
       offset 0) as d
    union all
    select website_id, kind, member, day, null, true from fresh
  ),
  timeline as (
    select merged.*, false as named from merged
    union all
    select website_id, kind, member, old_prev, null, false, true from merged where not is_new
  ),
  relinked as (
    select website_id, kind, member, day, old_prev, is_new, named,
           coalesce(last_value(day) over (partition by website_id, kind, member order by day
                                          range between unbounded preceding and '1 day' preceding),
                    '-infinity'::date) as new_prev
      from timeline
  ),
  changed as (select * from relinked where not named and (is_new or old_prev <> new_prev)),
  written as (
    insert into public.analytics_distinct_days as t (website_id, kind, member, day, prev_day)
    select website_id, kind, member, day, new_prev from changed order by 1, 2, 3, 4
    on conflict (website_id, kind, member, day) do update set prev_day = excluded.prev_day
  ),
  deltas as (
    select website_id, kind, day, new_prev as prev_day, 1 as members from changed
    union all
    select website_id, kind, day, old_prev, -1 from changed where not is_new
  )
  insert into public.analytics_daily_distinct as t (website_id, kind, day, prev_day, members)
  select website_id, kind, day, prev_day, sum(members)
    from deltas
   group by 1, 2, 3, 4
  having sum(members) <> 0
   order by 1, 2, 3, 4
  on conflict (website_id, kind, day, prev_day) do update set members = t.members + excluded.members;

  -- Sessions: per-day first and last event, event counts, prev_day and next_day.
  with batch as (
    select website_id, session_id, (created_at at time zone 'UTC')::date as day,
           min(created_at) as first_at, max(created_at) as last_at, count(*)::integer as events,
           (count(*) filter (where event_type = 'page_view'))::integer as page_views
      from inserted
     group by 1, 2, 3
  ),
  existing as (
    select s.* from (select distinct website_id, session_id from batch) as t
     cross join lateral (
       select * from public.analytics_session_days s
        where s.website_id = t.website_id and s.session_id = t.session_id
       offset 0) as s
  ),
  merged as (
    select coalesce(e.website_id, b.website_id) as website_id,
           coalesce(e.session_id, b.session_id) as session_id,
           coalesce(e.day, b.day) as day,
           e.day is null as is_new,
           e.prev_day as old_prev, e.next_day as old_next, e.first_at as old_first, e.last_at as old_last,
           e.events as old_events, e.page_views as old_page_views,
           least(e.first_at, b.first_at) as first_at,
           greatest(e.last_at, b.last_at) as last_at,
           coalesce(e.events, 0) + coalesce(b.events, 0) as events,
           coalesce(e.page_views, 0) + coalesce(b.page_views, 0) as page_views
      from existing e
      full join batch b on b.website_id = e.website_id and b.session_id = e.session_id and b.day = e.day
  ),
  timeline as (
    select merged.*, false as named from merged
    union all
    select website_id, session_id, named_day, false, null, null, null, null, null, null, null, null, null, null, true
      from merged, lateral (values (old_prev), (old_next)) as named (named_day)
     where not is_new
  ),
  relinked as (
    select timeline.*,
           coalesce(last_value(day) over (w range between unbounded preceding and '1 day' preceding), '-infinity'::date) as new_prev,
           coalesce(first_value(day) over (w range between '1 day' following and unbounded following), 'infinity'::date) as new_next
      from timeline
    window w as (partition by website_id, session_id order by day)
  ),
  changed as (
    select relinked.*, (day::timestamp at time zone 'UTC') as midnight
      from relinked
     where not named and (is_new or old_prev <> new_prev or old_next <> new_next or old_first <> first_at
        or old_last <> last_at or old_events <> events or old_page_views <> page_views)
  ),
  written as (
    insert into public.analytics_session_days as t
           (website_id, session_id, day, prev_day, next_day, first_at, last_at, events, page_views)
    select website_id, session_id, day, new_prev, new_next, first_at, last_at, events, page_views
      from changed
     order by 1, 2, 3
    on conflict (website_id, session_id, day) do update
       set prev_day = excluded.prev_day, next_day = excluded.next_day, first_at = excluded.first_at,
           last_at = excluded.last_at, events = excluded.events, page_views = excluded.page_views
  ),
  deltas as (
    select website_id, day, new_prev as prev_day, new_next as next_day, 1 as sessions,
           (events = 1 and page_views = 1)::integer as bounces,
           round(extract(epoch from first_at - midnight) * 1000)::bigint as first_offset_ms,
           round(extract(epoch from last_at - midnight) * 1000)::bigint as last_offset_ms
      from changed
    union all
    select website_id, day, old_prev, old_next, -1,
           -((old_events = 1 and old_page_views = 1)::integer),
           -round(extract(epoch from old_first - midnight) * 1000)::bigint,
           -round(extract(epoch from old_last - midnight) * 1000)::bigint
      from changed
     where not is_new
  )
  insert into public.analytics_daily_sessions as t
         (website_id, day, prev_day, next_day, sessions, bounces, first_offset_ms, last_offset_ms)
  select website_id, day, prev_day, next_day, sum(sessions), sum(bounces), sum(first_offset_ms), sum(last_offset_ms)
    from deltas
   group by 1, 2, 3, 4
   order by 1, 2, 3, 4
  on conflict (website_id, day, prev_day, next_day) do update
     set sessions = t.sessions + excluded.sessions,
         bounces = t.bounces + excluded.bounces,
         first_offset_ms = t.first_offset_ms + excluded.first_offset_ms,
         last_offset_ms = t.last_offset_ms + excluded.last_offset_ms;

  return null;
end;
$$;

create or replace function public.apply_analytics_dimension_rollups()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'analytics events must be inserted under READ COMMITTED'
      using errcode = '25001';
  end if;
  -- The same per-website locks as apply_analytics_rollups (already held when
  -- it ran first in this transaction; taking them again is free).
  perform pg_advisory_xact_lock(hashtext('public.apply_analytics_rollups'), website_key)
     from (select distinct hashtext(website_id::text) as website_key from inserted order by 1) as websites;

  with candidates as (
    select distinct website_id, d.dimension, d.value, visitor_id, (created_at at time zone 'UTC')::date as day
      from inserted,
           lateral (values ('country', country), ('utm_source', utm_source),
                           ('utm_medium', utm_medium), ('utm_campaign', utm_campaign)) as d (dimension, value)
     where d.value is not null
  ),
  fresh as (
    select c.* from candidates c
      left join lateral (
        select true as seen from public.analytics_dimension_days d
         where d.website_id = c.website_id and d.dimension = c.dimension and d.value = c.value
           and d.visitor_id = c.visitor_id and d.day = c.day
         limit 1) as known on true
     where known.seen is null
  ),
  touched as (select distinct website_id, dimension, value, visitor_id from fresh),
  merged as (
    select t.website_id, t.dimension, t.value, t.visitor_id, d.day, d.prev_day as old_prev, false as is_new
      from touched t
     cross join lateral (
       select day, prev_day from public.analytics_dimension_days d
        where d.website_id = t.website_id and d.dimension = t.dimension and d.value = t.value
          and d.visitor_id = t.visitor_id
       offset 0) as d
    union all
    select website_id, dimension, value, visitor_id, day, null, true from fresh
  ),
  timeline as (
    select merged.*, false as named from merged
    union all
    select website_id, dimension, value, visitor_id, old_prev, null, false, true from merged where not is_new
  ),
  relinked as (
    select website_id, dimension, value, visitor_id, day, old_prev, is_new, named,
           coalesce(last_value(day) over (partition by website_id, dimension, value, visitor_id order by day
                                          range between unbounded preceding and '1 day' preceding),
                    '-infinity'::date) as new_prev
      from timeline
  ),
  changed as (select * from relinked where not named and (is_new or old_prev <> new_prev)),
  written as (
    insert into public.analytics_dimension_days as t (website_id, dimension, value, visitor_id, day, prev_day)
    select website_id, dimension, value, visitor_id, day, new_prev from changed order by 1, 2, 3, 4, 5
    on conflict (website_id, dimension, value, visitor_id, day) do update set prev_day = excluded.prev_day
  ),
  deltas as (
    select website_id, dimension, day, value, new_prev as prev_day, 1 as visitors from changed
    union all
    select website_id, dimension, day, value, old_prev, -1 from changed where not is_new
  )
  insert into public.analytics_daily_dimensions as t (website_id, dimension, day, value, prev_day, visitors)
  select website_id, dimension, day, value, prev_day, sum(visitors)
    from deltas
   group by 1, 2, 3, 4, 5
  having sum(visitors) <> 0
   order by 1, 2, 3, 4, 5
  on conflict (website_id, dimension, day, value, prev_day) do update set visitors = t.visitors + excluded.visitors;

  return null;
end;
$$;
