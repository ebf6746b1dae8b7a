-- A session is open only while its user may use it. A ban (the dashboard's
-- "ban user", the admin API's ban_duration) sets auth.users.banned_until and
-- nothing else: the auth server keeps the user's sessions, refuses their
-- tokens on its own endpoints (403 user_banned) and their refresh tokens, but
-- a check of auth.sessions alone let the access tokens already issued work
-- here until they expired, up to an hour. A soft-deleted user (deleted_at)
-- has lost their sessions in the same transaction; checked here as well.
-- When the ban ends (banned_until passes, or ban_duration 'none'), the
-- sessions work again, as they do at the auth server.
--
-- banned_until and deleted_at are read through to_jsonb: the first generation
-- of auth.users (the local stack without an auth server) has neither column,
-- and a plain reference would fail every session check there.

-- The rule, in one place: the session check and the notification recipients
-- (20261126100400) both ask it.
create function public.account_in_use(account jsonb)
returns boolean
language sql
stable
set search_path = ''
as $$
  select coalesce((account ->> 'banned_until')::timestamptz <= now(), true)
     and account ->> 'deleted_at' is null;
$$;

comment on function public.account_in_use(jsonb) is 'Whether an auth.users row (as to_jsonb) is neither banned nor deleted.';

revoke all on function public.account_in_use(jsonb) from public, anon, authenticated, service_role;

create or replace function public.session_is_open(p_user_id uuid, p_session_id uuid)
returns boolean
language plpgsql
stable
security definer
set search_path = ''
as $$
begin
  return exists (
    select 1
      from auth.sessions s
      join auth.users u on u.id = s.user_id
     where s.id = p_session_id and s.user_id = p_user_id
       and (s.not_after is null or s.not_after > now())
       and public.account_in_use(to_jsonb(u))
  );
end;
$$;

comment on function public.session_is_open(uuid, uuid) is 'True while the session exists, has not reached not_after, and its user is neither banned nor deleted; for the API''s session check.';

revoke all on function public.session_is_open(uuid, uuid) from public, anon, authenticated;
grant execute on function public.session_is_open(uuid, uuid) to service_role;
