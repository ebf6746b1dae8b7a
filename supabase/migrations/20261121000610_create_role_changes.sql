-- Every grant and revocation of a role, recorded by a trigger on user_roles,
-- so no code path (API, other services, a console session) can change roles
-- unrecorded. Who: the signed-in user's id, else what the service put in
-- `app.actor` for the transaction (e.g. `legacy-admin:<userId>`), else the
-- database role of the session.

create table public.role_changes (
  id bigint generated always as identity primary key,
  -- Whom; no foreign key, so the record outlives the account.
  user_id uuid not null,
  role public.app_role not null,
  action text not null check (action in ('granted', 'revoked')),
  changed_by text not null,
  created_at timestamptz not null default now()
);

create index role_changes_user_id_created_at_idx on public.role_changes (user_id, created_at desc);
create index role_changes_created_at_idx on public.role_changes (created_at desc);

create function public.record_role_change()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  actor text := coalesce(
    (select auth.uid())::text,
    nullif(current_setting('app.actor', true), ''),
    'database:' || session_user
  );
begin
  if tg_op in ('DELETE', 'UPDATE') then
    insert into public.role_changes (user_id, role, action, changed_by)
    values (old.user_id, old.role, 'revoked', actor);
  end if;
  if tg_op in ('INSERT', 'UPDATE') then
    insert into public.role_changes (user_id, role, action, changed_by)
    values (new.user_id, new.role, 'granted', actor);
  end if;
  return null;
end;
$$;

revoke all on function public.record_role_change() from public, anon, authenticated;

create trigger user_roles_record_change
  after insert or update or delete on public.user_roles
  for each row execute function public.record_role_change();

alter table public.role_changes enable row level security;

revoke all on table public.role_changes from anon, authenticated;
grant select on table public.role_changes to authenticated;
grant all on table public.role_changes to service_role;
-- Identity columns need no sequence privilege; the platform's default grants
-- would let the API roles setval the sequence (not undone by a rollback), and
-- the next insert would then fail on a duplicate key.
revoke all on sequence public.role_changes_id_seq from anon, authenticated;

create policy "Admins can read role changes"
  on public.role_changes for select
  to authenticated
  using ((select public.has_role('admin')));
