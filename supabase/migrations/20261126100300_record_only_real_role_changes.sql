-- role_changes records grants and revocations. An update of a user_roles row
-- that keeps its user and role is neither: deleting an account in the
-- dashboard sets granted_by to null on every role that account had granted
-- (the foreign key's `on delete set null`), and each such row was recorded
-- as revoked and granted again, by the auth server, for users nobody touched.

create or replace function public.record_role_change()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  actor text := coalesce(
    (select auth.uid())::text,
    nullif(current_setting('app.actor', true), ''),
    'database:' || session_user
  );
begin
  if tg_op = 'UPDATE' and old.user_id = new.user_id and old.role = new.role then
    return null;
  end if;
  if tg_op in ('DELETE', 'UPDATE') then
    insert into public.role_changes (user_id, role, action, changed_by)
    values (old.user_id, old.role, 'revoked', actor);
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    insert into public.role_changes (user_id, role, action, changed_by)
    values (new.user_id, new.role, 'granted', actor);
  end if;
  return null;
end;
$$;

revoke all on function public.record_role_change() from public, anon, authenticated;
