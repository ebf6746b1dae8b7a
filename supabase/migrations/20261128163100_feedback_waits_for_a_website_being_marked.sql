-- A submission whose check ran while a website's deletion mark was being
-- written (begin_website_deletion, not yet committed) read the website as
-- not being deleted, then waited on the mark's row lock in the foreign-key
-- check and was stored on the marked website after all (201), in the admin
-- list filtered by that website until the deletion finished.
--
-- The check now locks the website row it reads (FOR SHARE, which waits for
-- any update of the row in progress) and so reads the row as that update
-- left it. A mark that comes after the lock waits for the submission's
-- commit, and the deletion then takes the new feedback with the website.
create or replace function public.refuse_feedback_for_website_being_deleted()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  being_deleted boolean;
begin
  if new.website_id is null then
    return new;
  end if;
  select w.deletion_started_at is not null into being_deleted
    from public.websites w
   where w.id = new.website_id
     for share;
  if being_deleted then
    raise foreign_key_violation using
      message = 'insert or update on table "feedback" violates foreign key constraint "feedback_website_id_fkey"',
      detail = format('Website %s is being deleted.', new.website_id),
      constraint = 'feedback_website_id_fkey';
  end if;
  return new;
end;
$$;
