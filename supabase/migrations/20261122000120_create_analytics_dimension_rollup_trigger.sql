-- Keeps analytics_dimension_days / analytics_daily_dimensions in step with
-- analytics_events, in the inserting statement, exactly as the visitor part
-- of apply_analytics_rollups does (same relinking when a day arrives between
-- two known ones, same index-probe lookups). A trigger of its own, so the
-- first rollup function stays as it landed.

create function public.apply_analytics_dimension_rollups()
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
  relinked as (
    select merged.*,
           coalesce(lag(day) over (partition by website_id, dimension, value, visitor_id order by day),
                    '-infinity'::date) as new_prev
      from merged
  ),
  changed as (select * from relinked where is_new or old_prev <> new_prev),
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

revoke all on function public.apply_analytics_dimension_rollups() from public, anon, authenticated;

-- Statement triggers fire in name order: this one after analytics_events_apply_rollups.
create trigger analytics_events_apply_rollups_dimensions
  after insert on public.analytics_events
  referencing new table as inserted
  for each statement execute function public.apply_analytics_dimension_rollups();
