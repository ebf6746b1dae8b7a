-- Two callers deleting one website at once (two instances' deletion workers
-- after a deploy, a DELETE sent twice) fell through to deleting all of it in
-- one statement. Both picked the same first rows of the events; the second
-- waited on the first's row locks, then found those rows gone and deleted 0,
-- which read as "this table is empty" and sent it to the next table. Once it
-- had emptied the rollups that way, a further collision left it nothing but
-- the website row, and the cascade deleted every remaining event in one
-- statement: the long statement the batches exist to avoid, which on a large
-- website runs into the statement timeout.
--
-- Calls for one website now take turns (a transaction-level advisory lock on
-- the website), and each statement after the wait reads what the call before
-- it committed. Calls for different websites do not wait for each other. The
-- rest is the function as 20261127120000 made it.

create or replace function public.delete_website_batch(website uuid, batch_size integer)
returns integer
language plpgsql
security definer
set search_path = ''
set enable_bitmapscan = off
set enable_seqscan = off
as $$
declare
  data_table text;
  deleted integer;
begin
  if batch_size is null or batch_size < 1 or batch_size > 100000 then
    raise exception 'batch_size must be between 1 and 100000' using errcode = '22023';
  end if;
  perform pg_advisory_xact_lock(hashtext('public.delete_website_batch'), hashtext(website::text));
  if not exists (select 1 from public.websites where id = website and deletion_started_at is not null) then
    return 0;
  end if;
  perform set_config('analytics.website_deletion', 'on', true);
  foreach data_table in array array[
    'analytics_events', 'analytics_daily_totals', 'analytics_daily_pages', 'analytics_daily_referrers',
    'analytics_distinct_days', 'analytics_daily_distinct', 'analytics_session_days', 'analytics_daily_sessions',
    'analytics_dimension_days', 'analytics_daily_dimensions'
  ] loop
    execute format(
      'delete from public.%I where ctid = any (array(select ctid from public.%I where website_id = $1 limit $2))',
      data_table, data_table)
      using website, batch_size;
    get diagnostics deleted = row_count;
    exit when deleted > 0;
  end loop;
  perform set_config('analytics.website_deletion', 'off', true);
  if deleted > 0 then
    return deleted;
  end if;
  set local enable_bitmapscan to default;
  set local enable_seqscan to default;
  -- Anything another table still holds goes by the cascade.
  delete from public.websites where id = website;
  get diagnostics deleted = row_count;
  return deleted;
end;
$$;
