-- service_role, the API's elevated path (and the legacy admin token's), was
-- granted ALL on our tables, and ALL holds TRUNCATE, TRIGGER and REFERENCES
-- as well as the rows' rights. With them it could attach a trigger to a table
-- (a change to the schema it is said not to make), empty user_roles past the
-- last-admin rule and past role_changes (TRUNCATE fires no row trigger), and
-- delete or rewrite the record of role changes. It keeps SELECT, INSERT,
-- UPDATE and DELETE where it had them, but on role_changes, which only its
-- trigger writes (as the owner), it may now only read. The API never
-- truncates, and the migrations and scripts that do run as the owner.
-- PostgreSQL 17 adds MAINTAIN to ALL (VACUUM, REINDEX, LOCK TABLE in any
-- mode), which it loses there too.
--
-- Supabase's default privileges give every new table ALL again: a migration
-- that makes a table grants service_role select, insert, update, delete
-- (tests/rls-attacks.test.ts reads the catalog and fails on any other).

revoke truncate, trigger, references on all tables in schema public from service_role;
revoke insert, update, delete on table public.role_changes from service_role;

do $$
begin
  if current_setting('server_version_num')::int >= 170000 then
    execute 'revoke maintain on all tables in schema public from service_role';
  end if;
end;
$$;
