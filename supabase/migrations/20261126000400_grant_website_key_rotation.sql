-- Rotating a website's API key (POST /api/websites/:id/api-key): a key that
-- leaked or was lost could only be replaced by deleting the website, and its
-- analytics with it. Editors and admins write the new key's hash and display
-- prefix under the update policy they already hold; the deletion mark stays
-- begin_website_deletion's alone.
grant update (api_key_hash, api_key_prefix) on table public.websites to authenticated;

-- A website being deleted must stay keyless: until now only
-- begin_website_deletion could write a key, and the update policy did not
-- need to exclude marked rows. An UPDATE that reads no column (no WHERE on
-- the hidden row) would otherwise give one a working key again.
drop policy "Editors and admins can update websites" on public.websites;

create policy "Editors and admins can update websites not being deleted"
  on public.websites for update
  to authenticated
  using (deletion_started_at is null and ((select public.has_role('editor')) or (select public.has_role('admin'))))
  with check (deletion_started_at is null and ((select public.has_role('editor')) or (select public.has_role('admin'))));
