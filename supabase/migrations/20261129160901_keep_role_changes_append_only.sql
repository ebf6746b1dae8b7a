-- role_changes, the record of who changed roles, could be emptied (TRUNCATE,
-- as the dashboard's Table Editor does when every row is selected) or
-- rewritten (changed_by) by hand in the Supabase dashboard, which acts as
-- `postgres` (docs/admin.md, "Rows edited in the Supabase dashboard").

-- role_changes is written only by record_role_change (an insert, as the
-- owner). Nothing deletes from it: it has no foreign key (the record outlives
-- the account), so no cascade reaches it, and no retention prunes it. An owner
-- who must remove records (an erasure request) disables this trigger in the
-- same transaction, on purpose.
create function public.refuse_role_change_edits()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  raise exception 'role_changes is append-only: it records who granted and revoked roles'
    using errcode = '55000', hint = 'Its trigger on user_roles writes every record; change roles in user_roles, and the change is recorded.';
end;
$$;

revoke all on function public.refuse_role_change_edits() from public, anon, authenticated;

create trigger role_changes_append_only
  before update or delete or truncate on public.role_changes
  for each statement execute function public.refuse_role_change_edits();
