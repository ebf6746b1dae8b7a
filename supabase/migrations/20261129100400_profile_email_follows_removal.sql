-- A profile's e-mail followed every change of the account's address but its
-- removal: with auth.users.email set to null (the auth server's admin API
-- can, for an account that signs in by phone) the profile kept the old
-- address, and public.admin_notification_emails() went on sending an admin's
-- feedback notifications to an address the account no longer has. The
-- profile now holds '' then, as it does for an account made without one
-- (handle_new_auth_user), and notifications skip ''. The profiles of
-- addresses removed before now are mended too.

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
     set email = coalesce(new.email, ''),
         last_login = coalesce(new.last_sign_in_at, last_login),
         updated_at = now()
   where id = new.id
     and (email is distinct from coalesce(new.email, '')
          or last_login is distinct from coalesce(new.last_sign_in_at, last_login));
  return new;
end;
$$;

revoke all on function public.handle_updated_auth_user() from public, anon, authenticated;

update public.profiles p
   set email = '', updated_at = now()
  from auth.users u
 where u.id = p.id and u.email is null and p.email <> '';
