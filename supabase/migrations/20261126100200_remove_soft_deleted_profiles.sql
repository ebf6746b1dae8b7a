-- A soft-deleted account (the admin API's delete with should_soft_delete)
-- keeps its auth.users row, with the e-mail replaced by a hash, the password
-- and metadata cleared, deleted_at set and every session ended. The profile
-- followed the e-mail, so the admins' list went on showing the account under
-- a hash, with its roles, and a soft-deleted admin went on counting as the
-- admin who lets the last real one step down. Now it ends as a deletion
-- does: profile and roles go in the auth server's own transaction.
--
-- deleted_at is read through to_jsonb: the first generation of auth.users
-- (the local stack without an auth server) has no such column, and a plain
-- reference would fail every e-mail change there.

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

revoke all on function public.handle_updated_auth_user() from public, anon, authenticated;

-- As before, but a soft-deleted account is a deleted one: its admin role may
-- go although it is the last, as it does when the account is deleted.
create or replace function public.protect_last_admin()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if old.role = 'admin' and (tg_op = 'DELETE' or new.role <> 'admin') then
    perform pg_advisory_xact_lock(hashtext('public.user_roles: last admin'));
    if exists (select 1 from auth.users u where u.id = old.user_id and to_jsonb(u) ->> 'deleted_at' is null)
       and not exists (select 1 from public.user_roles where role = 'admin' and user_id <> old.user_id) then
      raise exception 'the last admin cannot lose the admin role'
        using errcode = 'PT409', hint = 'Grant admin to another user first.';
    end if;
  end if;
  if tg_op = 'DELETE' then
    return old;
  end if;
  return new;
end;
$$;

revoke all on function public.protect_last_admin() from public, anon, authenticated;

-- Accounts soft-deleted before this migration.
delete from public.user_roles r using auth.users u where u.id = r.user_id and to_jsonb(u) ->> 'deleted_at' is not null;
delete from public.profiles p using auth.users u where u.id = p.id and to_jsonb(u) ->> 'deleted_at' is not null;
