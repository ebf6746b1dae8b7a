-- Analytics events, append-only. The service writes them in batches as an
-- elevated operation (one multi-row INSERT per batch); readers with a role
-- see them under row-level security. Summaries are served from the per-day
-- rollups (next migrations), which a statement trigger keeps in step inside
-- the same transaction as each insert. docs/analytics.md explains why the
-- rollups stay exact.
--
-- No IP address is stored: visitor_id is the caller's userId or a hash of a
-- daily-rotating salt, the website, the client IP and the user agent.

create table public.analytics_events (
  -- UUIDv7 from the service: time-ordered, so the primary key grows at its right edge.
  id uuid primary key,
  website_id uuid not null references public.websites (id) on delete cascade,
  event_type text not null check (event_type in ('page_view', 'click', 'form_submit', 'custom')),
  page text not null check (char_length(page) between 1 and 2048),
  referrer text check (char_length(referrer) <= 2048),
  -- Host of the referrer, lower case, without a leading `www.`.
  referrer_host text check (char_length(referrer_host) <= 253),
  user_agent text not null check (char_length(user_agent) <= 1024),
  device_type text not null check (device_type in ('desktop', 'mobile', 'tablet')),
  session_id text not null check (char_length(session_id) between 1 and 128),
  user_id text check (char_length(user_id) <= 128),
  visitor_id text not null check (char_length(visitor_id) between 1 and 128),
  metadata jsonb not null default '{}'::jsonb check (jsonb_typeof(metadata) = 'object'),
  created_at timestamptz not null default now()
);

comment on table public.analytics_events is
  'Append-only analytics events; rollups in analytics_daily_* are maintained by trigger on insert.';

-- Events arrive in time order, so a BRIN index on the time is tiny and serves
-- time-range scans (retention, exports). The btree serves per-website reads
-- and the cascade when a website is deleted.
create index analytics_events_created_at_brin on public.analytics_events using brin (created_at);
create index analytics_events_website_created_idx on public.analytics_events (website_id, created_at);

alter table public.analytics_events enable row level security;

-- Supabase grants everything to the API roles by default: take it back and
-- give only what is meant. Writing is the service's job (service_role).
revoke all on table public.analytics_events from anon, authenticated;
grant select on table public.analytics_events to authenticated;
grant all on table public.analytics_events to service_role;

create policy "Viewers, editors and admins can read analytics events"
  on public.analytics_events for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));
