-- Keeps the rollups (previous migration) in step with analytics_events: one
-- statement trigger per INSERT or COPY, set-based over the inserted rows, in
-- the inserting transaction. So an acknowledged event is in the rollups, and
-- a failed batch leaves neither events nor rollups behind.
--
-- Events may arrive out of day order (a batch straddling midnight, a bulk
-- load). When a member gains a day between two it already had, the day after
-- it is relinked (prev_day, next_day) and the totals move with it: every
-- changed row subtracts its old contribution and adds its new one.

-- The lookups of a batch's members and sessions are LATERAL subqueries with
-- LIMIT / OFFSET 0, which the planner cannot flatten into a hash join over a
-- whole rollup table: each is an index probe, so a batch costs the same on a
-- table of a thousand rows or a hundred million, whatever its statistics say.
-- (Left to the planner, young or stale statistics led to sequential scans
-- whose cost per batch grew with the table.)

create function public.apply_analytics_rollups()
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
  relinked as (
    select merged.*,
           coalesce(lag(day) over (partition by website_id, kind, member order by day), '-infinity'::date) as new_prev
      from merged
  ),
  changed as (select * from relinked where is_new or old_prev <> new_prev),
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
  relinked as (
    select merged.*,
           coalesce(lag(day) over w, '-infinity'::date) as new_prev,
           coalesce(lead(day) over w, 'infinity'::date) as new_next
      from merged
    window w as (partition by website_id, session_id order by day)
  ),
  changed as (
    select relinked.*, (day::timestamp at time zone 'UTC') as midnight
      from relinked
     where is_new or old_prev <> new_prev or old_next <> new_next or old_first <> first_at
        or old_last <> last_at or old_events <> events or old_page_views <> page_views
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

revoke all on function public.apply_analytics_rollups() from public, anon, authenticated;

create trigger analytics_events_apply_rollups
  after insert on public.analytics_events
  referencing new table as inserted
  for each statement execute function public.apply_analytics_rollups();

-- Events are append-only: the rollups only follow inserts. Deleting a
-- website removes its events and rollups together (foreign key cascades, which
-- run inside the referential trigger, hence the depth test).
create function public.refuse_analytics_event_changes()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if tg_op = 'DELETE' and pg_trigger_depth() > 1 then
    return null;
  end if;
  raise exception 'analytics events are append-only (delete the website to remove its events)'
    using errcode = '55000';
end;
$$;

revoke all on function public.refuse_analytics_event_changes() from public, anon, authenticated;

create trigger analytics_events_append_only
  before update or delete or truncate on public.analytics_events
  for each statement execute function public.refuse_analytics_event_changes();
