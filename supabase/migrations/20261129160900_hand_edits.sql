-- Admins of a hosted project also edit rows by hand: the Supabase dashboard's
-- Table Editor and SQL Editor act as `postgres`, past row-level security and
-- the API's checks. What such an edit broke, the tables now refuse, or mend
-- as the API would (docs/admin.md, "Rows edited in the Supabase dashboard"):
--
-- 1. TRUNCATE fires no row trigger: the Table Editor empties a table with it
--    when every row is selected, and user_roles lost its last admin past
--    protect_last_admin, unrecorded in role_changes. role_changes itself could
--    be emptied or rewritten (changed_by), though it is the record of who
--    changed roles.
-- 2. A profile deleted by hand left its account with /me 404 for good (sign-in
--    only updated a profile that exists), and an admin without one kept the
--    role while the API could neither list nor revoke it. An e-mail typed
--    into a profile sent the admins' notifications to that address and made
--    the account's reset e-mail 404.
-- 3. A timestamp JavaScript's Date cannot hold (`infinity`, `0001-01-01 BC`)
--    made the admin lists and the export answer 500.
-- 4. Feedback set to `resolved` without a `resolved_at` failed the table's
--    check; set back to `pending` it failed unless both resolution columns
--    were cleared by hand.

-- 1. One guard for every table that TRUNCATE must not empty: the hint says
-- what to run instead.
create function public.refuse_truncate()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  raise exception 'public.% cannot be truncated: TRUNCATE skips the rules each row is held to', tg_table_name
    using errcode = '55000', hint = tg_argv[0];
end;
$$;

revoke all on function public.refuse_truncate() from public, anon, authenticated;

create trigger user_roles_no_truncate
  before truncate on public.user_roles
  for each statement execute function public.refuse_truncate(
    'Delete the rows instead (delete from public.user_roles where ...): the last-admin rule and role_changes see each one.');

-- A profile goes with its account (below), not on its own.
create trigger profiles_no_truncate
  before truncate on public.profiles
  for each statement execute function public.refuse_truncate(
    'Delete the users in Authentication instead: their profiles and roles go with them.');

-- role_changes is written only by record_role_change (an insert, as the
-- owner). Nothing deletes from it: it has no foreign key (the record outlives
-- the account), so no cascade reaches it, and no retention prunes it. An owner
-- who must remove records (an erasure request) disables this trigger in the
-- same transaction, on purpose.
create function public.refuse_role_change_edits()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  raise exception 'role_changes is append-only: it records who granted and revoked roles'
    using errcode = '55000', hint = 'Its trigger on user_roles writes every record; change roles in user_roles, and the change is recorded.';
end;
$$;

revoke all on function public.refuse_role_change_edits() from public, anon, authenticated;

create trigger role_changes_append_only
  before update or delete or truncate on public.role_changes
  for each statement execute function public.refuse_role_change_edits();

-- 2. A sign-in (or any change of e-mail or sign-in time) gives an account
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

-- 3. The API writes each timestamp as Date#toISOString and its schemas take
-- four-digit years: the columns it shows hold instants from 1970 to 9999
-- only. The API itself writes now(), or the auth server's times.
alter table public.profiles
  add constraint profiles_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'),
  add constraint profiles_last_login_in_range check (last_login >= '1970-01-01 00:00:00+00' and last_login < '10000-01-01 00:00:00+00'),
  add constraint profiles_updated_at_in_range check (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00');

alter table public.feedback
  add constraint feedback_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'),
  add constraint feedback_updated_at_in_range check (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00'),
  add constraint feedback_resolved_at_in_range check (resolved_at >= '1970-01-01 00:00:00+00' and resolved_at < '10000-01-01 00:00:00+00');

alter table public.websites
  add constraint websites_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'),
  add constraint websites_updated_at_in_range check (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00'),
  add constraint websites_deletion_started_at_in_range check (deletion_started_at >= '1970-01-01 00:00:00+00' and deletion_started_at < '10000-01-01 00:00:00+00');

alter table public.app_logs
  add constraint app_logs_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00');

-- 4. A change of status made without the API gets what the API's own update
-- (modules/feedback/queries.ts, updateFeedbackTriage) would store with it:
-- becoming resolved, resolved_at is now() unless the statement sets one;
-- back to pending, the resolution columns the statement leaves are cleared;
-- archived keeps them. resolved_by is left as given (the API would name its
-- caller; the dashboard's is no user). The API's own updates already set
-- these columns so, and pass unchanged.
create function public.follow_feedback_status()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if new.status = 'resolved' and new.resolved_at is not distinct from old.resolved_at then
    new.resolved_at := now();
  elsif new.status = 'pending' then
    if new.resolved_at is not distinct from old.resolved_at then
      new.resolved_at := null;
    end if;
    if new.resolved_by is not distinct from old.resolved_by then
      new.resolved_by := null;
    end if;
  end if;
  return new;
end;
$$;

revoke all on function public.follow_feedback_status() from public, anon, authenticated;

create trigger feedback_resolution_follows_status
  before update of status on public.feedback
  for each row
  when (old.status is distinct from new.status)
  execute function public.follow_feedback_status();
