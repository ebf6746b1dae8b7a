-- The last-admin rule counted a banned admin as "another admin": an admin
-- could give up the role while the only other admin was banned, and no one
-- could then use the admin routes until the ban ended (or someone ran
-- npm run grant-role). An admin role may now go only while another admin
-- whose account is in use (public.account_in_use: neither banned nor
-- deleted) keeps one. A banned admin's own role may go while another admin
-- remains (the admins in use are as many as before), and the last admin of
-- all keeps the role even when banned: there is never no admin at all.

create or replace function public.protect_last_admin()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  losing jsonb;
begin
  if old.role = 'admin' and (tg_op = 'DELETE' or new.role <> 'admin') then
    perform pg_advisory_xact_lock(hashtext('public.user_roles: last admin'));
    select to_jsonb(u) into losing from auth.users u where u.id = old.user_id;
    -- A deleted account (or one being deleted) may lose every role: that is a decision about the account.
    if losing is null or losing ->> 'deleted_at' is not null then
      return case when tg_op = 'DELETE' then old else new end;
    end if;
    if not exists (
      select 1
        from public.user_roles r
        join auth.users u on u.id = r.user_id
       where r.role = 'admin' and r.user_id <> old.user_id
         and (public.account_in_use(to_jsonb(u)) or not public.account_in_use(losing))
    ) then
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
