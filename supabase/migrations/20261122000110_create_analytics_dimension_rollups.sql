-- Unique visitors per country and per campaign tag, exact over any range of
-- whole UTC days, the same way analytics_distinct_days / analytics_daily_distinct
-- count visitors (docs/analytics.md, "Rollups"): one row per (dimension,
-- value, visitor, day seen) remembering the previous day that visitor was
-- seen with that value; a visitor is counted once in [s, e], on the day whose
-- prev_day < s.

create table public.analytics_dimension_days (
  website_id uuid not null references public.websites (id) on delete cascade,
  dimension text not null check (dimension in ('country', 'utm_source', 'utm_medium', 'utm_campaign')),
  value text not null,
  visitor_id text not null,
  day date not null,
  prev_day date not null,
  primary key (website_id, dimension, value, visitor_id, day)
);

-- How many visitors had `value` on `day` with that previous day. The key
-- leads with (website, dimension, day), which is what the range queries filter on.
create table public.analytics_daily_dimensions (
  website_id uuid not null references public.websites (id) on delete cascade,
  dimension text not null check (dimension in ('country', 'utm_source', 'utm_medium', 'utm_campaign')),
  day date not null,
  value text not null,
  prev_day date not null,
  visitors bigint not null,
  primary key (website_id, dimension, day, value, prev_day)
);

alter table public.analytics_dimension_days enable row level security;
revoke all on table public.analytics_dimension_days from anon, authenticated;
grant select on table public.analytics_dimension_days to authenticated;
grant all on table public.analytics_dimension_days to service_role;
create policy "Viewers, editors and admins can read dimension visitor days"
  on public.analytics_dimension_days for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_daily_dimensions enable row level security;
revoke all on table public.analytics_daily_dimensions from anon, authenticated;
grant select on table public.analytics_daily_dimensions to authenticated;
grant all on table public.analytics_daily_dimensions to service_role;
create policy "Viewers, editors and admins can read daily dimension visitors"
  on public.analytics_daily_dimensions for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));
