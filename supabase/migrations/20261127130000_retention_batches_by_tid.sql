-- Each retention batch read the whole events table. `delete ... where id in
-- (select id ... limit n)` was planned as a hash semi join: the batch's ids
-- hashed, then a sequential scan of every row of the table to find them. Its
-- cost grew with the table, not the batch: 117 ms for a batch of 5,000 in a
-- table of a million events here, 4 ms the way below, and at tens of millions
-- of rows a batch would outlast the statement timeout, and retention would
-- never again delete anything (docs/analytics.md, "Retention").
--
-- The batch's rows are now named by their physical address (ctid), as
-- delete_website_batch names them: the delete fetches exactly those rows.

create or replace function public.delete_analytics_events_before(cutoff timestamptz, batch_size integer)
returns integer
language plpgsql
security definer
set search_path = ''
as $$
declare
  deleted integer;
begin
  if batch_size is null or batch_size < 1 or batch_size > 100000 then
    raise exception 'batch_size must be between 1 and 100000' using errcode = '22023';
  end if;
  perform set_config('analytics.retention_delete', 'on', true);
  delete from public.analytics_events
   where ctid = any (array(select ctid from public.analytics_events where created_at < cutoff limit batch_size));
  get diagnostics deleted = row_count;
  perform set_config('analytics.retention_delete', 'off', true);
  return deleted;
end;
$$;
