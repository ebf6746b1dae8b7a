-- Profiles mirror auth.users: the auth server owns the account, we keep the
-- profile (name) and the last sign-in, filled by triggers so that no code
-- path can create a user without a profile.

create table public.profiles (
  id uuid primary key references auth.users (id) on delete cascade,
  email text not null,
  name text not null check (char_length(name) >= 2),
  created_at timestamptz not null default now(),
  last_login timestamptz,
  updated_at timestamptz not null default now()
);

create index profiles_email_idx on public.profiles (lower(email));

comment on table public.profiles is 'One row per auth.users row, kept in step by triggers on auth.users.';

-- Runs as its owner: the auth server's role has no rights on public.
create function public.handle_new_auth_user()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  insert into public.profiles (id, email, name, created_at, last_login)
  values (
    new.id,
    coalesce(new.email, ''),
    coalesce(nullif(trim(new.raw_user_meta_data ->> 'name'), ''), split_part(coalesce(new.email, 'user'), '@', 1), 'user'),
    coalesce(new.created_at, now()),
    new.last_sign_in_at
  );
  return new;
end;
$$;

create function public.handle_updated_auth_user()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  update public.profiles
     set email = coalesce(new.email, email),
         last_login = coalesce(new.last_sign_in_at, last_login),
         updated_at = now()
   where id = new.id
     and (email is distinct from coalesce(new.email, email)
          or last_login is distinct from coalesce(new.last_sign_in_at, last_login));
  return new;
end;
$$;

-- Trigger functions are called only as triggers: the platform's default
-- EXECUTE for the API roles is taken back from each.
revoke all on function public.handle_new_auth_user() from public, anon, authenticated;
revoke all on function public.handle_updated_auth_user() from public, anon, authenticated;

create trigger on_auth_user_created
  after insert on auth.users
  for each row execute function public.handle_new_auth_user();

create trigger on_auth_user_updated
  after update of email, last_sign_in_at on auth.users
  for each row execute function public.handle_updated_auth_user();

create function public.touch_updated_at()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  new.updated_at = now();
  return new;
end;
$$;

revoke all on function public.touch_updated_at() from public, anon, authenticated;

create trigger profiles_touch_updated_at
  before update on public.profiles
  for each row execute function public.touch_updated_at();

alter table public.profiles enable row level security;

revoke all on table public.profiles from anon, authenticated;
grant select on table public.profiles to authenticated;
-- A user may change their name; e-mail and sign-in times follow auth.users.
grant update (name) on table public.profiles to authenticated;
grant all on table public.profiles to service_role;

create policy "Users can read their own profile"
  on public.profiles for select
  to authenticated
  using (id = (select auth.uid()));

create policy "Users can update their own profile"
  on public.profiles for update
  to authenticated
  using (id = (select auth.uid()))
  with check (id = (select auth.uid()));
