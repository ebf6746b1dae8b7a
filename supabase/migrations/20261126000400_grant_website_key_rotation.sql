-- Rotating a website's API key (POST /api/websites/:id/api-key): a key that
-- leaked or was lost could only be replaced by deleting the website, and its
-- analytics with it. Editors and admins write the new key's hash and display
-- prefix under the update policy they already hold; the deletion mark stays
-- begin_website_deletion's alone.
grant update (api_key_hash, api_key_prefix) on table public.websites to authenticated;
