-- Role assignments (SPEC: admin, editor, viewer). Every signed-in user also
-- has the implicit role `user`, which is not stored.

create type public.app_role as enum ('admin', 'editor', 'viewer');

create table public.user_roles (
  user_id uuid not null references auth.users (id) on delete cascade,
  role public.app_role not null,
  granted_at timestamptz not null default now(),
  granted_by uuid references auth.users (id) on delete set null,
  primary key (user_id, role)
);

create index user_roles_role_idx on public.user_roles (role);

-- Policies call this instead of reading user_roles themselves: it runs as
-- its owner, so it neither recurses into user_roles' own policies nor needs
-- the caller to see the table. search_path is pinned against hijacking.
create function public.has_role(wanted public.app_role)
returns boolean
language sql
stable
security definer
set search_path = ''
as $$
  select exists (
    select 1 from public.user_roles
     where user_id = (select auth.uid()) and role = wanted
  );
$$;

revoke all on function public.has_role(public.app_role) from public;
grant execute on function public.has_role(public.app_role) to anon, authenticated, service_role;

alter table public.user_roles enable row level security;

revoke all on table public.user_roles from anon, authenticated;
grant select, insert, delete on table public.user_roles to authenticated;
grant all on table public.user_roles to service_role;

create policy "Users can read their own roles"
  on public.user_roles for select
  to authenticated
  using (user_id = (select auth.uid()));

create policy "Admins can read every role assignment"
  on public.user_roles for select
  to authenticated
  using ((select public.has_role('admin')));

create policy "Admins can grant roles"
  on public.user_roles for insert
  to authenticated
  with check ((select public.has_role('admin')));

create policy "Admins can revoke roles"
  on public.user_roles for delete
  to authenticated
  using ((select public.has_role('admin')));

create policy "Admins can read every profile"
  on public.profiles for select
  to authenticated
  using ((select public.has_role('admin')));

create policy "Admins can update every profile"
  on public.profiles for update
  to authenticated
  using ((select public.has_role('admin')))
  with check ((select public.has_role('admin')));
