-- Feedback naming a website whose deletion has begun is refused as feedback
-- naming no website is: the website is gone from the API from the moment it
-- is marked (row-level security and the website queries leave it out), but
-- the foreign key alone let a submission name it until its row was deleted,
-- and the admin list filtered by that website then showed the new row.
--
-- The error is the foreign key's own (23503, feedback_website_id_fkey), which
-- the feedback service already answers as 400 `Website not found`. Security
-- definer: the public form submits as anon, which cannot read websites.
create function public.refuse_feedback_for_website_being_deleted()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  if new.website_id is not null
     and exists (select 1 from public.websites w where w.id = new.website_id and w.deletion_started_at is not null) then
    raise foreign_key_violation using
      message = 'insert or update on table "feedback" violates foreign key constraint "feedback_website_id_fkey"',
      detail = format('Website %s is being deleted.', new.website_id),
      constraint = 'feedback_website_id_fkey';
  end if;
  return new;
end;
$$;

revoke all on function public.refuse_feedback_for_website_being_deleted() from public, anon, authenticated;

create trigger feedback_website_not_being_deleted
  before insert or update of website_id on public.feedback
  for each row execute function public.refuse_feedback_for_website_being_deleted();
