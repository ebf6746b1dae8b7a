-- Each call of delete_website_batch must cost the same, however many of the
-- website's rows are left. It did not: asked for any `batch_size` rows of the
-- website, the planner found them with a bitmap scan, which reads every index
-- entry the website has (the rows left and those earlier batches deleted)
-- before it hands back the first, or, once statistics said the website was
-- most of the table, with a sequential scan, which reads every page earlier
-- batches emptied. Either way each batch grew with the deletion, and deleting
-- a website took time in the square of its rows (docs/analytics.md, "Deleting
-- a website", has the measurements).
--
-- With both turned off for the batch, the plan is a scan of the table's
-- website_id-led index, which stops after the batch's rows; the entries of
-- rows that earlier, committed batches deleted are marked dead the first time
-- a scan passes them, so later scans skip them without visiting the table.
-- Asking for the rows in index order instead was not enough: with a freshly
-- filled table the planner expects a few hundred rows, sorts them, and keeps
-- the bitmap scan. The settings go back to the defaults before the final
-- cascade, whose statements (the feedback counts' trigger among them) plan as
-- usual: forced off there, a sequential scan of a table with no index costs
-- enough to be JIT-compiled, 180 ms for an empty table. The function's SET
-- clauses end both with the call.

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
