-- Ends the session a refresh token belongs to, for POST /api/auth/refresh
-- when the auth server refuses that token as already used: one older than
-- the parent of the session's active token, after the reuse interval, which
-- means it was stolen (or a client went badly wrong). With rotation on
-- (supabase/config.toml) the auth server then revokes the session's refresh
-- tokens, but honours each one for the reuse interval after its revocation,
-- and a refresh within it hands out a new token that is never revoked: a
-- thief's client refreshing every few seconds kept the session. Deleting the
-- session ends it for good, as a sign-out does: its refresh tokens go with it
-- (on delete cascade), the API refuses its access tokens
-- (public.session_is_open), and the auth server's logout entry is written
-- (public.write_logout_audit_entry, as end_session writes it).
--
-- By the token's text, so only a token the auth server stored (refresh token
-- algorithm v1, its default) is found; null when none is. plpgsql, so it can
-- be created before the auth server has made its tables.

create function public.end_session_of_refresh_token(p_token text)
returns uuid
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_session uuid;
  v_user uuid;
begin
  -- A database the auth server has not set up (the local stack without it) has no session to end.
  if to_regclass('auth.sessions') is null then
    return null;
  end if;
  delete from auth.sessions s
   using auth.refresh_tokens t
   where t.token = p_token and s.id = t.session_id
  returning s.id, s.user_id into v_session, v_user;
  if v_session is not null then
    perform public.write_logout_audit_entry(v_user);
  end if;
  return v_session;
end;
$$;

comment on function public.end_session_of_refresh_token(text) is 'Deletes the session a refresh token belongs to (its refresh tokens go with it) and writes the auth server''s logout audit entry; for the API''s refresh when the auth server finds the token reused.';

-- Supabase's default privileges grant every API role EXECUTE on new functions.
revoke all on function public.end_session_of_refresh_token(text) from public, anon, authenticated;
grant execute on function public.end_session_of_refresh_token(text) to service_role;
