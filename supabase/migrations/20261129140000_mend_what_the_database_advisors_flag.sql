-- What the Supabase dashboard's Security and Performance Advisors flagged on
-- this schema, mended, so that an admin who opens them sees only the findings
-- docs/admin.md explains ("What the database advisors say").

-- Unindexed foreign keys: deleting an account (auth.users) sets these to null
-- on its rows, and without an index each deletion read the whole table.
create index websites_created_by_idx on public.websites (created_by);
create index user_roles_granted_by_idx on public.user_roles (granted_by);

-- Multiple permissive policies for one role and action: PostgreSQL ORs them
-- anyway, so one policy with both conditions allows exactly the same rows;
-- the advisors flag each such pair as a cost on every query.
drop policy "Users can read their own profile" on public.profiles;
drop policy "Admins can read every profile" on public.profiles;
create policy "Users read their own profile, admins every profile"
  on public.profiles for select
  to authenticated
  using (id = (select auth.uid()) or (select public.has_role('admin')));

drop policy "Users can update their own profile" on public.profiles;
drop policy "Admins can update every profile" on public.profiles;
create policy "Users update their own profile, admins every profile"
  on public.profiles for update
  to authenticated
  using (id = (select auth.uid()) or (select public.has_role('admin')))
  with check (id = (select auth.uid()) or (select public.has_role('admin')));

drop policy "Users can read their own roles" on public.user_roles;
drop policy "Admins can read every role assignment" on public.user_roles;
create policy "Users read their own roles, admins every role assignment"
  on public.user_roles for select
  to authenticated
  using (user_id = (select auth.uid()) or (select public.has_role('admin')));

-- The submission policy already read the claims once per statement (inside
-- a sub-select), but the advisors look for `select current_setting(` itself:
-- the same test with the sub-select around the setting alone.
alter policy "The API submits pending feedback"
  on public.feedback
  with check (
    status = 'pending' and admin_notes is null and resolved_by is null and resolved_at is null
    and nullif((select current_setting('request.jwt.claims', true)), '')::jsonb ->> 'submitted_via' = 'api'
  );
