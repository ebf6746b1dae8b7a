-- A sign-out with an expired access token (public.end_session, from
-- 20261127160000) deleted the session but left no trace in the auth server's
-- audit log, where every other sign-out has a `logout` entry: an admin
-- reading a user's history in the Supabase dashboard saw the session end with
-- no sign-out. Now the function writes the entry the auth server's /logout
-- writes, with the same payload: the actor's id, e-mail (or phone when the
-- account has one), whether the account signs in through SSO, the
-- metadata's `full_name` when there is one, action `logout`, log type
-- `account`. The auth server's /logout records no IP address for a sign-out
-- (the column's default, ''), and neither does this.
--
-- The user's row is read as jsonb so that a column an older auth server lacks
-- reads as absent instead of failing the sign-out.

create or replace function public.end_session(p_user_id uuid, p_session_id uuid)
returns boolean
language plpgsql
security definer
set search_path = ''
as $$
declare
  v_user jsonb;
  v_payload jsonb;
begin
  -- A database the auth server has not set up (the local stack without it) has no session to end.
  if to_regclass('auth.sessions') is null then
    return false;
  end if;
  delete from auth.sessions where id = p_session_id and user_id = p_user_id;
  if not found then
    return false;
  end if;

  if to_regclass('auth.audit_log_entries') is not null then
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
  end if;
  return true;
end;
$$;

comment on function public.end_session(uuid, uuid) is 'Deletes one session of a user (its refresh tokens go with it) and writes the auth server''s logout audit entry; for the API''s sign-out with an expired access token.';

-- create or replace keeps the grants of 20261127160000 (service_role only).
