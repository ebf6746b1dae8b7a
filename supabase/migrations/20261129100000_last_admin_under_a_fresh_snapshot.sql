-- The last-admin rule takes an advisory lock and then looks for another
-- admin: under READ COMMITTED that look sees whatever the transaction before
-- it committed. Under REPEATABLE READ it reads the transaction's first
-- snapshot, taken before the lock: two sessions that each removed the other
-- admin both saw that admin still there, and both committed, leaving none.
-- SERIALIZABLE is no better as soon as the other removal is not serializable
-- too: PostgreSQL finds the conflict only between two serializable
-- transactions, and the API and PostgREST run under READ COMMITTED. So an
-- admin role is now removed only under READ COMMITTED (as analytics events
-- are inserted only under it); the rest is as before.

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
    if current_setting('transaction_isolation') <> 'read committed' then
      raise exception 'an admin role can be removed only under READ COMMITTED'
        using errcode = '25001', hint = 'Under a snapshot older than its lock the last-admin check could miss a removal just committed.';
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
