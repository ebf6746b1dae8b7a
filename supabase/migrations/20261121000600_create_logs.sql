-- Stored log entries (SPEC levels error, warn, info, http, debug): the
-- server's own entries at warn and above, written in batches by the service,
-- and entries that clients send to POST /api/admin/logs. Only admins read
-- them; old entries are pruned by the service (LOG_RETENTION_DAYS).

create type public.log_level as enum ('error', 'warn', 'info', 'http', 'debug');
create type public.log_source as enum ('server', 'client');

create table public.app_logs (
  id bigint generated always as identity primary key,
  level public.log_level not null,
  message text not null check (char_length(message) between 1 and 10000),
  context jsonb not null default '{}'::jsonb check (jsonb_typeof(context) = 'object'),
  source public.log_source not null,
  request_id text check (char_length(request_id) <= 128),
  -- Who sent a client entry; null for the server's own.
  user_id uuid references auth.users (id) on delete set null,
  created_at timestamptz not null default now()
);

comment on table public.app_logs is 'Server entries at warn and above, and client entries posted by admins.';

create index app_logs_created_at_idx on public.app_logs (created_at desc);
create index app_logs_level_created_at_idx on public.app_logs (level, created_at desc);

alter table public.app_logs enable row level security;

revoke all on table public.app_logs from anon, authenticated;
grant select on table public.app_logs to authenticated;
grant insert (level, message, context, source, request_id, user_id) on table public.app_logs to authenticated;
grant all on table public.app_logs to service_role;
-- Identity columns need no sequence privilege; the platform's default grants
-- would let the API roles setval the sequence (not undone by a rollback), and
-- the next insert would then fail on a duplicate key.
revoke all on sequence public.app_logs_id_seq from anon, authenticated;

create policy "Admins can read log entries"
  on public.app_logs for select
  to authenticated
  using ((select public.has_role('admin')));

create policy "Admins can store client log entries as themselves"
  on public.app_logs for insert
  to authenticated
  with check (
    (select public.has_role('admin'))
    and source = 'client'
    and user_id = (select auth.uid())
  );
