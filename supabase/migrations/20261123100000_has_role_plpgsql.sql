-- has_role in PL/pgSQL. As a SQL function that cannot be inlined (it is
-- security definer), Postgres parsed and planned its body again on every call:
-- 80–160 µs, paid once per statement by every admin policy, twice per admin
-- list (page and count). PL/pgSQL keeps the body's plan for the session, so a
-- call after the first costs a few microseconds. Same answer, same rights:
-- `create or replace` keeps the grants and the policies that use it.

create or replace function public.has_role(wanted public.app_role)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
    select 1 from public.user_roles
     where user_id = auth.uid() and role = wanted
  );
end;
$$;
