-- There is always at least one admin: revoking (or re-labelling) the last
-- admin role fails with SQLSTATE PT409, which the service answers with 409.
--
-- Removals of an admin role queue on one transaction-scoped advisory lock, so
-- two concurrent removals cannot each see the other's admin still present:
-- the second one re-reads the table (READ COMMITTED: each statement of the
-- function takes a fresh snapshot) after the first has committed.
-- Deleting the account itself (the cascade from auth.users) is allowed: that
-- is a decision about the account, not about its roles.

create function public.protect_last_admin()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if old.role = 'admin' and (tg_op = 'DELETE' or new.role <> 'admin') then
    perform pg_advisory_xact_lock(hashtext('public.user_roles: last admin'));
    if exists (select 1 from auth.users where id = old.user_id)
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

create trigger user_roles_protect_last_admin
  before delete or update of role on public.user_roles
  for each row execute function public.protect_last_admin();
