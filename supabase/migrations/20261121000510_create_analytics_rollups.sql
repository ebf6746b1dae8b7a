-- Per-day rollups that analytics summaries are served from, exact over any
-- range of whole UTC days (docs/analytics.md, "Rollups"):
--
-- * additive counts (events, page views, pages, referrers, load times) are
--   summed over the days of the range;
-- * distinct counts (visitors, sessions per device type) use, for each member
--   and day it was seen, the previous day it was seen (`prev_day`): a member
--   is counted once in [s, e] on its first day in the range, i.e. on the day
--   whose prev_day < s. Counting those rows needs only (day, prev_day) totals;
-- * sessions also keep `next_day`, so a session's first and last event inside
--   the range, and whether it bounced there, come from (day, prev_day,
--   next_day) totals.
--
-- `-infinity` / `infinity` stand for "no previous / next day".

create table public.analytics_daily_totals (
  website_id uuid not null references public.websites (id) on delete cascade,
  day date not null,
  events bigint not null default 0,
  page_views bigint not null default 0,
  load_time_sum numeric not null default 0,
  load_time_count bigint not null default 0,
  primary key (website_id, day)
);

create table public.analytics_daily_pages (
  website_id uuid not null references public.websites (id) on delete cascade,
  day date not null,
  page text not null,
  views bigint not null,
  primary key (website_id, day, page)
);

create table public.analytics_daily_referrers (
  website_id uuid not null references public.websites (id) on delete cascade,
  day date not null,
  source text not null,
  events bigint not null,
  primary key (website_id, day, source)
);

-- One row per member and day seen. kind `visitor`: member is a visitor id;
-- kind desktop/mobile/tablet: member is a session id seen with that device.
create table public.analytics_distinct_days (
  website_id uuid not null references public.websites (id) on delete cascade,
  kind text not null check (kind in ('visitor', 'desktop', 'mobile', 'tablet')),
  member text not null,
  day date not null,
  prev_day date not null,
  primary key (website_id, kind, member, day)
);

-- How many members of a kind were seen on `day` with that previous day.
create table public.analytics_daily_distinct (
  website_id uuid not null references public.websites (id) on delete cascade,
  kind text not null check (kind in ('visitor', 'desktop', 'mobile', 'tablet')),
  day date not null,
  prev_day date not null,
  members bigint not null,
  primary key (website_id, kind, day, prev_day)
);

-- One row per session and day it had events.
create table public.analytics_session_days (
  website_id uuid not null references public.websites (id) on delete cascade,
  session_id text not null,
  day date not null,
  prev_day date not null,
  next_day date not null,
  first_at timestamptz not null,
  last_at timestamptz not null,
  events integer not null,
  page_views integer not null,
  primary key (website_id, session_id, day)
);

-- Totals of analytics_session_days rows by (day, prev_day, next_day):
-- bounces counts rows with exactly one event, a page view; the offsets are
-- milliseconds after midnight UTC of `day` of first_at and last_at.
create table public.analytics_daily_sessions (
  website_id uuid not null references public.websites (id) on delete cascade,
  day date not null,
  prev_day date not null,
  next_day date not null,
  sessions bigint not null,
  bounces bigint not null,
  first_offset_ms bigint not null,
  last_offset_ms bigint not null,
  primary key (website_id, day, prev_day, next_day)
);

-- Row-level security: read by viewers, editors and admins; written only by
-- the rollup trigger (security definer, next migration) and service_role.

alter table public.analytics_daily_totals enable row level security;
revoke all on table public.analytics_daily_totals from anon, authenticated;
grant select on table public.analytics_daily_totals to authenticated;
grant all on table public.analytics_daily_totals to service_role;
create policy "Viewers, editors and admins can read daily analytics totals"
  on public.analytics_daily_totals for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_daily_pages enable row level security;
revoke all on table public.analytics_daily_pages from anon, authenticated;
grant select on table public.analytics_daily_pages to authenticated;
grant all on table public.analytics_daily_pages to service_role;
create policy "Viewers, editors and admins can read daily page views"
  on public.analytics_daily_pages for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_daily_referrers enable row level security;
revoke all on table public.analytics_daily_referrers from anon, authenticated;
grant select on table public.analytics_daily_referrers to authenticated;
grant all on table public.analytics_daily_referrers to service_role;
create policy "Viewers, editors and admins can read daily referrers"
  on public.analytics_daily_referrers for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_distinct_days enable row level security;
revoke all on table public.analytics_distinct_days from anon, authenticated;
grant select on table public.analytics_distinct_days to authenticated;
grant all on table public.analytics_distinct_days to service_role;
create policy "Viewers, editors and admins can read visitor and device days"
  on public.analytics_distinct_days for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_daily_distinct enable row level security;
revoke all on table public.analytics_daily_distinct from anon, authenticated;
grant select on table public.analytics_daily_distinct to authenticated;
grant all on table public.analytics_daily_distinct to service_role;
create policy "Viewers, editors and admins can read daily distinct counts"
  on public.analytics_daily_distinct for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_session_days enable row level security;
revoke all on table public.analytics_session_days from anon, authenticated;
grant select on table public.analytics_session_days to authenticated;
grant all on table public.analytics_session_days to service_role;
create policy "Viewers, editors and admins can read session days"
  on public.analytics_session_days for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

alter table public.analytics_daily_sessions enable row level security;
revoke all on table public.analytics_daily_sessions from anon, authenticated;
grant select on table public.analytics_daily_sessions to authenticated;
grant all on table public.analytics_daily_sessions to service_role;
create policy "Viewers, editors and admins can read daily session totals"
  on public.analytics_daily_sessions for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));
