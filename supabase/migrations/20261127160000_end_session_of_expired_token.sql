-- Ends one session of the auth server, for POST /api/auth/signout with an
-- access token that has expired. The auth server's own /logout refuses an
-- expired token, so a user who signed out after an hour away was told
-- `No active session` while the session went on: its refresh token still
-- worked, up to the session's inactivity timeout (30 days in
-- supabase/config.toml). The API verifies the token's signature first
-- (everything but its expiry); this function then deletes the session the
-- token names, as the auth server's /logout does, and its refresh tokens go
-- with it (refresh_tokens.session_id references it on delete cascade).
--
-- Only the session the token names, and only if it is that user's. True when
-- there was one to end. plpgsql, so it can be created before the auth server
-- has made its tables (as public.session_is_open), and answers false while
-- there are none.

create function public.end_session(p_user_id uuid, p_session_id uuid)
returns boolean
language plpgsql
security definer
set search_path = ''
as $$
begin
  -- A database the auth server has not set up (the local stack without it) has no session to end.
  if to_regclass('auth.sessions') is null then
    return false;
  end if;
  delete from auth.sessions where id = p_session_id and user_id = p_user_id;
  return found;
end;
$$;

comment on function public.end_session(uuid, uuid) is 'Deletes one session of a user (its refresh tokens go with it); for the API''s sign-out with an expired access token.';

-- Supabase's default privileges grant every API role EXECUTE on new functions.
revoke all on function public.end_session(uuid, uuid) from public, anon, authenticated;
grant execute on function public.end_session(uuid, uuid) to service_role;
