-- Whether an access token's session is still open in auth.sessions. The API
-- connects as a login role that can only switch to anon, authenticated and
-- service_role, and none of them may read the auth server's tables; this
-- function, owned by the migration owner, answers just this one question.
-- Only service_role may call it (the auth context's session check).
-- plpgsql, so it can be created before the auth server has made its tables.

create function public.session_is_open(p_user_id uuid, p_session_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
    select 1 from auth.sessions
     where id = p_session_id and user_id = p_user_id
       and (not_after is null or not_after > now())
  );
end;
$$;

comment on function public.session_is_open(uuid, uuid) is 'True while the session exists and has not reached not_after; for the API''s session check.';

-- Supabase's default privileges grant every API role EXECUTE on new functions.
revoke all on function public.session_is_open(uuid, uuid) from public, anon, authenticated;
grant execute on function public.session_is_open(uuid, uuid) to service_role;
