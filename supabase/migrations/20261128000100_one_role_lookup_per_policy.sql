-- One role lookup per policy. A policy open to several roles asked for each
-- in turn, `(select has_role('viewer')) or (select has_role('editor')) or
-- (select has_role('admin'))`: three init plans, each its own call and its
-- own lookup in user_roles, and an admin (who holds that role alone) paid all
-- three in every statement. An analytics summary is eleven statements over
-- such tables: an admin's made about 35 has_role calls, a viewer's about 12
-- (pg_stat_user_functions), and it took an admin 670 µs against a viewer's
-- 541 (docs/performance.md, "One role lookup a statement"). has_any_role asks
-- once for the set. The answers are the same: true when the caller holds at
-- least one of the roles, checked in every statement, so a revoked role is
-- gone at once.

create function public.has_any_role(variadic wanted public.app_role[])
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  -- PL/pgSQL keeps this plan for the session (20261123100000_has_role_plpgsql.sql).
  return exists (
    select 1 from public.user_roles
     where user_id = auth.uid() and role = any (wanted)
  );
end;
$$;

comment on function public.has_any_role(public.app_role[]) is
  'Whether the caller (auth.uid()) holds at least one of the roles; one lookup, for policies open to several roles.';

revoke all on function public.has_any_role(public.app_role[]) from public;
grant execute on function public.has_any_role(public.app_role[]) to anon, authenticated, service_role;

-- The same policies (names, commands, roles), each with one lookup.

alter policy "Viewers, editors and admins can read analytics events" on public.analytics_events
  using ((select public.has_any_role('viewer', 'editor', 'admin')));

alter policy "Viewers, editors and admins can read daily analytics totals" on public.analytics_daily_totals
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read daily page views" on public.analytics_daily_pages
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read daily referrers" on public.analytics_daily_referrers
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read visitor and device days" on public.analytics_distinct_days
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read daily distinct counts" on public.analytics_daily_distinct
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read session days" on public.analytics_session_days
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read daily session totals" on public.analytics_daily_sessions
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read dimension visitor days" on public.analytics_dimension_days
  using ((select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Viewers, editors and admins can read daily dimension visitors" on public.analytics_daily_dimensions
  using ((select public.has_any_role('viewer', 'editor', 'admin')));

alter policy "Viewers, editors and admins can read websites not being deleted" on public.websites
  using (deletion_started_at is null and (select public.has_any_role('viewer', 'editor', 'admin')));
alter policy "Editors and admins can create websites" on public.websites
  with check ((select public.has_any_role('editor', 'admin')));
alter policy "Editors and admins can update websites not being deleted" on public.websites
  using (deletion_started_at is null and (select public.has_any_role('editor', 'admin')))
  with check (deletion_started_at is null and (select public.has_any_role('editor', 'admin')));
