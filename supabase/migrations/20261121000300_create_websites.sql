-- Websites whose analytics we collect. The API key is the website's own
-- credential: only its SHA-256 hash is stored, with a short prefix to show.

create table public.websites (
  id uuid primary key default gen_random_uuid(),
  name text not null check (char_length(name) between 1 and 200),
  domain text not null check (char_length(domain) between 1 and 253),
  api_key_hash bytea not null unique,
  api_key_prefix text not null,
  settings jsonb not null default '{}'::jsonb check (jsonb_typeof(settings) = 'object'),
  metadata jsonb not null default '{}'::jsonb check (jsonb_typeof(metadata) = 'object'),
  created_by uuid references auth.users (id) on delete set null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now()
);

create index websites_created_at_idx on public.websites (created_at desc);

create trigger websites_touch_updated_at
  before update on public.websites
  for each row execute function public.touch_updated_at();

alter table public.websites enable row level security;

revoke all on table public.websites from anon, authenticated;
grant select, insert, update, delete on table public.websites to authenticated;
grant all on table public.websites to service_role;

create policy "Viewers, editors and admins can read websites"
  on public.websites for select
  to authenticated
  using ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')));

create policy "Editors and admins can create websites"
  on public.websites for insert
  to authenticated
  with check ((select public.has_role('editor')) or (select public.has_role('admin')));

create policy "Editors and admins can update websites"
  on public.websites for update
  to authenticated
  using ((select public.has_role('editor')) or (select public.has_role('admin')))
  with check ((select public.has_role('editor')) or (select public.has_role('admin')));

create policy "Admins can delete websites"
  on public.websites for delete
  to authenticated
  using ((select public.has_role('admin')));
