-- A website's creator and a role's grantor are the caller who wrote the row.
-- INSERT on both tables was granted on every column and the policies checked
-- only the caller's role, so through SQL (the Data API, were it switched on)
-- an editor could create a website "created by" another user, dated 2000 or
-- already marked for deletion, and an admin could record a grant "by"
-- another admin at any time. The API itself always wrote auth.uid() and the
-- defaults; now the database holds everyone to that.

-- The caller is the default: an insert that leaves the column out names its
-- caller (null for the service role, which has no user and bypasses the policies).
alter table public.websites alter column created_by set default auth.uid();
alter table public.user_roles alter column granted_by set default auth.uid();

-- Only the columns the API writes; id, the timestamps and the deletion mark keep their defaults.
revoke insert on table public.websites from authenticated;
grant insert (name, domain, settings, metadata, api_key_hash, api_key_prefix, created_by)
  on table public.websites to authenticated;
revoke insert on table public.user_roles from authenticated;
grant insert (user_id, role, granted_by) on table public.user_roles to authenticated;

alter policy "Editors and admins can create websites" on public.websites
  with check (created_by = (select auth.uid()) and (select public.has_any_role('editor', 'admin')));
alter policy "Admins can grant roles" on public.user_roles
  with check (granted_by = (select auth.uid()) and (select public.has_role('admin')));
