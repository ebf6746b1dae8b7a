-- Sessions the API ends in the database, where the auth server's /logout
-- cannot end them, now leave the trace that /logout leaves.
--
-- 1. A sign-out with an expired access token (public.end_session, from
--    20261127160000) deleted the session but wrote nothing to the auth
--    server's audit log, where every other sign-out has a `logout` entry: an
--    admin reading a user's history in the Supabase dashboard saw the session
--    end with no sign-out. It now writes that entry.
-- 2. public.end_all_sessions ends every session of a user, as /logout with
--    scope `global` does. POST /api/auth/update-password ends with that
--    call; the password change before it has already ended every other
--    session, and the global sign-out ends the one the reset token opened.
--    When the auth server fails that last step, the password has changed and
--    the token is spent, so the API ends the sessions here and answers 200.
--
-- The entry is the one /logout writes (the auth server's NewAuditLogEntry):
-- the actor's id, e-mail (or phone when the account has one), whether it
-- signs in through SSO, the metadata's `full_name` when there is one, action
-- `logout`, log type `account`, and no IP address (the column's default '',
-- as /logout records none). The user's row is read as jsonb so that a column
-- an older auth server lacks reads as absent instead of failing the sign-out.

create function public.write_logout_audit_entry(p_user_id uuid)
returns void
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_user jsonb;
  v_payload jsonb;
begin
  if to_regclass('auth.audit_log_entries') is null then
    return;
  end if;
  select to_jsonb(u) into v_user from auth.users u where u.id = p_user_id;
  v_payload := jsonb_build_object(
    'action', 'logout',
    'actor_id', p_user_id,
    'actor_username', case when coalesce(v_user->>'phone', '') <> '' then v_user->>'phone' else coalesce(v_user->>'email', '') end,
    'actor_via_sso', coalesce((v_user->>'is_sso_user')::boolean, false),
    'log_type', 'account'
  );
  if v_user->'raw_user_meta_data' ? 'full_name' then
    v_payload := v_payload || jsonb_build_object('actor_name', v_user->'raw_user_meta_data'->'full_name');
  end if;
  insert into auth.audit_log_entries (instance_id, id, payload, created_at)
  values ('00000000-0000-0000-0000-000000000000', gen_random_uuid(), v_payload::json, now());
end;
$$;

comment on function public.write_logout_audit_entry(uuid) is 'Writes the auth server''s logout audit entry for a user; for the functions that end sessions in the database.';

create or replace function public.end_session(p_user_id uuid, p_session_id uuid)
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
  if not found then
    return false;
  end if;
  perform public.write_logout_audit_entry(p_user_id);
  return true;
end;
$$;

comment on function public.end_session(uuid, uuid) is 'Deletes one session of a user (its refresh tokens go with it) and writes the auth server''s logout audit entry; for the API''s sign-out with an expired access token.';

create function public.end_all_sessions(p_user_id uuid)
returns integer
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_ended integer;
begin
  if to_regclass('auth.sessions') is null then
    return 0;
  end if;
  delete from auth.sessions where user_id = p_user_id;
  get diagnostics v_ended = row_count;
  -- /logout with scope global writes its one entry whether or not sessions were left.
  perform public.write_logout_audit_entry(p_user_id);
  return v_ended;
end;
$$;

comment on function public.end_all_sessions(uuid) is 'Deletes every session of a user (their refresh tokens go with them) and writes the auth server''s logout audit entry; for update-password when the auth server fails to end them.';

-- Supabase's default privileges grant every API role EXECUTE on new
-- functions. The entry is written only through the two functions above;
-- create or replace keeps end_session's grants (service_role only).
revoke all on function public.write_logout_audit_entry(uuid) from public, anon, authenticated, service_role;
revoke all on function public.end_all_sessions(uuid) from public, anon, authenticated;
grant execute on function public.end_all_sessions(uuid) to service_role;
