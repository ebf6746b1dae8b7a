-- Feedback reaches the table only through the API's submission route, with
-- its bot check and rate limit. Before, anon and authenticated could insert
-- pending feedback: with the Supabase Data API exposing `public`, anyone
-- holding the public anon key (or a signed-in user's token) could post rows
-- straight to the table, each enqueuing a notification e-mail.
--
-- The API submits as anon with JWT claims that carry `submitted_via: api`.
-- The Data API sets `request.jwt.claims` from the caller's verified JWT, and
-- neither the anon key nor a token of the auth server has that claim; a JWT
-- that did would need the project's JWT secret. Signed-in users never
-- submitted as themselves (the API submits as anon), so they lose the grant.
--
-- Deploy the server first: it sends the claim whatever this policy says; an
-- older server against this policy would have its submissions refused.

revoke insert on table public.feedback from authenticated;

drop policy "Anyone can submit pending feedback" on public.feedback;

create policy "The API submits pending feedback"
  on public.feedback for insert
  to anon
  with check (
    status = 'pending' and admin_notes is null and resolved_by is null and resolved_at is null
    and (select nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'submitted_via') = 'api'
  );
