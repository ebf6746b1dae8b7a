-- Admins of a hosted project also edit rows by hand: the Supabase dashboard's
-- Table Editor and SQL Editor act as `postgres`, past row-level security and
-- the API's checks. What such an edit broke, the tables now refuse, or mend
-- as the API would (docs/admin.md, "Rows edited in the Supabase dashboard"):
-- this migration and the five after it, one concern each.
--
-- TRUNCATE fires no row trigger: the Table Editor empties a table with it
-- when every row is selected, and user_roles lost its last admin past
-- protect_last_admin, unrecorded in role_changes.

-- One guard for every table that TRUNCATE must not empty (profiles too, in
-- 20261129160902): the hint says what to run instead.
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
