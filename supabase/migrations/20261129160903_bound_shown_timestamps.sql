-- A timestamp JavaScript's Date cannot hold (`infinity`, `0001-01-01 BC`),
-- typed by hand in the Supabase dashboard (which acts as `postgres`;
-- docs/admin.md, "Rows edited in the Supabase dashboard"), made the admin
-- lists and the export answer 500.
--
-- The checks are added NOT VALID, so adding them reads no row: ADD
-- CONSTRAINT locks its table ACCESS EXCLUSIVE until the migration commits
-- (each runs in a transaction of its own), and profiles, which every sign-in
-- writes, feedback, websites and app_logs would wait while every row was
-- checked. Each row written from here on is checked; the rows already there
-- are checked by 20261129160904, without blocking reads or writes.

-- A row already out of range stops this migration, before any check is
-- added: added NOT VALID, the checks would refuse every later write to such a
-- row (a profile's: its account's every sign-in) until it was mended. The
-- search reads the tables under ACCESS SHARE, beside reads and writes.
do $$
declare
  outside text;
begin
  select string_agg(found.column_name, ', ') into outside
    from (
      select 'profiles.created_at' as column_name where exists (select 1 from public.profiles where not (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'))
      union all select 'profiles.last_login' where exists (select 1 from public.profiles where not (last_login >= '1970-01-01 00:00:00+00' and last_login < '10000-01-01 00:00:00+00'))
      union all select 'profiles.updated_at' where exists (select 1 from public.profiles where not (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00'))
      union all select 'feedback.created_at' where exists (select 1 from public.feedback where not (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'))
      union all select 'feedback.updated_at' where exists (select 1 from public.feedback where not (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00'))
      union all select 'feedback.resolved_at' where exists (select 1 from public.feedback where not (resolved_at >= '1970-01-01 00:00:00+00' and resolved_at < '10000-01-01 00:00:00+00'))
      union all select 'websites.created_at' where exists (select 1 from public.websites where not (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'))
      union all select 'websites.updated_at' where exists (select 1 from public.websites where not (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00'))
      union all select 'websites.deletion_started_at' where exists (select 1 from public.websites where not (deletion_started_at >= '1970-01-01 00:00:00+00' and deletion_started_at < '10000-01-01 00:00:00+00'))
      union all select 'app_logs.created_at' where exists (select 1 from public.app_logs where not (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00'))
    ) as found;
  if outside is not null then
    raise exception 'rows hold timestamps outside 1970 to 9999 in %', outside
      using errcode = '23514',
            hint = 'Give those columns a real time (docs/admin.md, "Rows edited in the Supabase dashboard"), then run the migrations again.';
  end if;
end;
$$;

-- The API writes each timestamp as Date#toISOString and its schemas take
-- four-digit years: the columns it shows hold instants from 1970 to 9999
-- only. The API itself writes now(), or the auth server's times.
alter table public.profiles
  add constraint profiles_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00') not valid,
  add constraint profiles_last_login_in_range check (last_login >= '1970-01-01 00:00:00+00' and last_login < '10000-01-01 00:00:00+00') not valid,
  add constraint profiles_updated_at_in_range check (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00') not valid;

alter table public.feedback
  add constraint feedback_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00') not valid,
  add constraint feedback_updated_at_in_range check (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00') not valid,
  add constraint feedback_resolved_at_in_range check (resolved_at >= '1970-01-01 00:00:00+00' and resolved_at < '10000-01-01 00:00:00+00') not valid;

alter table public.websites
  add constraint websites_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00') not valid,
  add constraint websites_updated_at_in_range check (updated_at >= '1970-01-01 00:00:00+00' and updated_at < '10000-01-01 00:00:00+00') not valid,
  add constraint websites_deletion_started_at_in_range check (deletion_started_at >= '1970-01-01 00:00:00+00' and deletion_started_at < '10000-01-01 00:00:00+00') not valid;

alter table public.app_logs
  add constraint app_logs_created_at_in_range check (created_at >= '1970-01-01 00:00:00+00' and created_at < '10000-01-01 00:00:00+00') not valid;
