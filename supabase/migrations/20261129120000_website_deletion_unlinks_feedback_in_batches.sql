-- A website's feedback outlives it: feedback.website_id is `on delete set
-- null`. delete_website_batch's last call deleted the website row and left that
-- to the cascade, one statement over all of the website's feedback, which grows
-- with it: about 65 µs a row on a database of a million feedback rows, so a
-- website with more than some 75,000 of them ran into the statement timeout at
-- every try (its batch size halving on retry changes nothing for a cascade)
-- and stayed marked for good, hidden, keyless and never gone.
--
-- After its events and rollups, each call now unlinks up to `batch_size` of
-- the website's feedback (website_id set to null, as the cascade did: its
-- updated_at and the per-website counts move the same way), walking
-- feedback_website_id_created_at_idx. The website row goes only once none is
-- left, and its cascade finds nothing.
--
-- And no JIT: with sequential and bitmap scans switched off, a plan with no
-- other way to go (a statement of the feedback counts' trigger, which every
-- such update fires, empty or not) costs more than 10^10, far past
-- jit_above_cost, and PostgreSQL compiled it with LLVM at every call: 120 to
-- 500 ms for an update of nothing. The rest is the function as
-- 20261128163000 made it.

create or replace function public.delete_website_batch(website uuid, batch_size integer)
returns integer
language plpgsql
security definer
set search_path = ''
set enable_bitmapscan = off
set enable_seqscan = off
set jit = off
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
  -- By id, not ctid as the deletes above: an admin's triage of a row between
  -- the two reads gives it a new ctid, and a batch whose every row was so
  -- missed counted 0 and fell through to the cascade with the rest.
  update public.feedback set website_id = null
   where id = any (array(select id from public.feedback where website_id = website limit batch_size))
     and website_id = website;
  get diagnostics deleted = row_count;
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
