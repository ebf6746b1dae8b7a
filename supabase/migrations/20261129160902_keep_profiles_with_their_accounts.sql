-- A profile deleted by hand in the Supabase dashboard (which acts as
-- `postgres`; docs/admin.md, "Rows edited in the Supabase dashboard") left
-- its account with /me 404 for good (sign-in only updated a profile that
-- exists), and an admin without one kept the role while the API could
-- neither list nor revoke it. An e-mail typed into a profile sent the
-- admins' notifications to that address and made the account's reset
-- e-mail 404.

-- A sign-in (or any change of e-mail or sign-in time) gives an account
-- without a profile the one a new account gets (handle_new_auth_user's rule),
-- so a profile lost before this migration comes back at the next sign-in.
-- A soft-deleted account still loses its profile and roles (20261126100200).
create or replace function public.handle_updated_auth_user()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  -- The auth server's soft delete sets the e-mail and deleted_at in one statement.
  if to_jsonb(new) ->> 'deleted_at' is not null then
    delete from public.user_roles where user_id = new.id;
    delete from public.profiles where id = new.id;
    return new;
  end if;
  insert into public.profiles as p (id, email, name, created_at, last_login)
  values (
    new.id,
    coalesce(new.email, ''),
    coalesce(
      public.profile_name(new.raw_user_meta_data -> 'name'),
      public.profile_name(new.raw_user_meta_data -> 'full_name'),
      public.profile_name(to_jsonb(split_part(coalesce(new.email, ''), '@', 1))),
      'user'
    ),
    coalesce(new.created_at, now()),
    new.last_sign_in_at
  )
  on conflict (id) do update
     set email = excluded.email,
         last_login = coalesce(excluded.last_login, p.last_login),
         updated_at = now()
   where p.email is distinct from excluded.email
      or p.last_login is distinct from coalesce(excluded.last_login, p.last_login);
  return new;
end;
$$;

revoke all on function public.handle_updated_auth_user() from public, anon, authenticated;

-- A profile whose e-mail was typed in before this rule takes its account's
-- again: the typed address would go on getting the admins' notifications
-- until the account's next change.
update public.profiles p
   set email = coalesce(u.email, '')
  from auth.users u
 where u.id = p.id
   and p.email is distinct from coalesce(u.email, '');

-- A profile's e-mail is the account's (auth.users.email, '' when it has none),
-- written by the triggers above: a row whose account exists may not carry
-- another. A profile of no account is left to the foreign key to refuse.
create function public.refuse_profile_email_edits()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  mirrored text;
begin
  if tg_op = 'UPDATE' and new.email is not distinct from old.email then
    return new;
  end if;
  select coalesce(u.email, '') into mirrored from auth.users u where u.id = new.id;
  if found and new.email is distinct from mirrored then
    raise exception 'a profile''s e-mail follows its account (auth.users): it cannot be set here'
      using errcode = '55000', hint = 'Change the e-mail in Authentication (the user''s page): the profile follows.';
  end if;
  return new;
end;
$$;

revoke all on function public.refuse_profile_email_edits() from public, anon, authenticated;

create trigger profiles_email_follows_account
  before insert or update of email on public.profiles
  for each row execute function public.refuse_profile_email_edits();

-- A profile goes when its account goes: the cascade from auth.users (the row
-- is gone by then) or a soft delete (deleted_at is set by then). While the
-- account is in place it keeps its profile.
create function public.refuse_deleting_profile_of_account()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if exists (select 1 from auth.users u where u.id = old.id and to_jsonb(u) ->> 'deleted_at' is null) then
    raise exception 'a profile goes with its account: this account still exists'
      using errcode = '55000', hint = 'Delete the user in Authentication: the profile and the roles go with it.';
  end if;
  return old;
end;
$$;

revoke all on function public.refuse_deleting_profile_of_account() from public, anon, authenticated;

create trigger profiles_go_with_their_account
  before delete on public.profiles
  for each row execute function public.refuse_deleting_profile_of_account();

-- Nor is the table emptied while accounts exist: TRUNCATE fires none of the
-- row triggers above (public.refuse_truncate, 20261129160900).
create trigger profiles_no_truncate
  before truncate on public.profiles
  for each statement execute function public.refuse_truncate(
    'Delete the users in Authentication instead: their profiles and roles go with them.');
