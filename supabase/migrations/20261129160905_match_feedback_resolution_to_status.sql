-- Feedback set to `resolved` by hand in the Supabase dashboard (which acts
-- as `postgres`; docs/admin.md, "Rows edited in the Supabase dashboard")
-- without a `resolved_at` failed the table's check
-- (feedback_resolution_matches_status); set back to `pending` it failed
-- unless both resolution columns were cleared by hand.

-- A change of status made without the API gets what the API's own update
-- (modules/feedback/queries.ts, updateFeedbackTriage) would store with it:
-- becoming resolved, resolved_at is now() unless the statement sets one;
-- back to pending, the resolution columns the statement leaves are cleared;
-- archived keeps them. resolved_by is left as given (the API would name its
-- caller; the dashboard's is no user). The API's own updates already set
-- these columns so, and pass unchanged.
create function public.follow_feedback_status()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if new.status = 'resolved' and new.resolved_at is not distinct from old.resolved_at then
    new.resolved_at := now();
  elsif new.status = 'pending' then
    if new.resolved_at is not distinct from old.resolved_at then
      new.resolved_at := null;
    end if;
    if new.resolved_by is not distinct from old.resolved_by then
      new.resolved_by := null;
    end if;
  end if;
  return new;
end;
$$;

revoke all on function public.follow_feedback_status() from public, anon, authenticated;

create trigger feedback_resolution_follows_status
  before update of status on public.feedback
  for each row
  when (old.status is distinct from new.status)
  execute function public.follow_feedback_status();
