-- Retention for the rollups' member rows. Raw events go after
-- ANALYTICS_RETENTION_MONTHS, but analytics_distinct_days (visitor and
-- session ids), analytics_dimension_days (visitor ids with their country and
-- campaign) and analytics_session_days (session ids, first and last event
-- times) kept every member's days for ever: at 13 months of a busy site,
-- 2.42 M rows beside 1.5 M events. The daily totals built from them hold no
-- ids and are kept, so the figures of old days do not change.
--
-- Deleting a member's rows before a day, in any order and any number of
-- batches, is exact under the previous migration's relinking: the remaining
-- rows name the deleted days next to them, and later events relink from
-- those. The retention worker picks the cut-off (docs/analytics.md,
-- "Retention").
--
-- One call deletes at most `batch_size` rows, taken from the three tables in
-- turn, and returns how many. The rows are picked first, without any lock;
-- then the websites they belong to are locked all at once, as the rollup
-- triggers lock them (the same keys, in the same order, so neither waits on
-- the other in a cycle), and as website deletion batches lock them. So no
-- trigger relinks a member from rows read while they were being deleted, and
-- a website being deleted loses its rows to one writer at a time. The
-- deletes name the rows by their physical address, as the events' retention
-- does (a row a trigger updated in between has a new one: see below).

create function public.delete_analytics_members_before(cutoff date, batch_size integer)
returns integer
language plpgsql
security definer
set search_path = ''
as $$
declare
  distinct_rows tid[];
  dimension_rows tid[];
  session_rows tid[];
  distinct_websites uuid[];
  dimension_websites uuid[];
  session_websites uuid[];
  websites uuid[];
  deleted integer;
  moved integer;
  total integer := 0;
begin
  if batch_size is null or batch_size < 1 or batch_size > 100000 then
    raise exception 'batch_size must be between 1 and 100000' using errcode = '22023';
  end if;
  if cutoff is null or not isfinite(cutoff) then
    raise exception 'cutoff must be a day' using errcode = '22023';
  end if;
  -- The deletes must see what the triggers committed while this call waited for their locks.
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'analytics members must be deleted under READ COMMITTED' using errcode = '25001';
  end if;

  select coalesce(array_agg(ctid), '{}'), coalesce(array_agg(website_id), '{}') into distinct_rows, distinct_websites
    from (select ctid, website_id from public.analytics_distinct_days where day < cutoff
           limit batch_size) as batch;
  select coalesce(array_agg(ctid), '{}'), coalesce(array_agg(website_id), '{}') into dimension_rows, dimension_websites
    from (select ctid, website_id from public.analytics_dimension_days where day < cutoff
           limit batch_size - cardinality(distinct_rows)) as batch;
  select coalesce(array_agg(ctid), '{}'), coalesce(array_agg(website_id), '{}') into session_rows, session_websites
    from (select ctid, website_id from public.analytics_session_days where day < cutoff
           limit batch_size - cardinality(distinct_rows) - cardinality(dimension_rows)) as batch;
  websites := distinct_websites || dimension_websites || session_websites;
  if cardinality(websites) = 0 then
    return 0;
  end if;

  perform pg_advisory_xact_lock(hashtext('public.apply_analytics_rollups'), website_key)
     from (select distinct hashtext(website::text) as website_key from unnest(websites) as website order by 1) as keys;
  perform pg_advisory_xact_lock(hashtext('public.delete_website_batch'), website_key)
     from (select distinct hashtext(website::text) as website_key from unnest(websites) as website order by 1) as keys;

  -- A picked row that a trigger changed before the locks were granted has
  -- moved (a session's last old day, relinked to a day it came back on), and
  -- its old address deletes nothing. Then old rows of the locked websites,
  -- which nothing else can change now, make up the number: so a batch that
  -- comes back short has left no row before the cut-off.
  delete from public.analytics_distinct_days where ctid = any (distinct_rows) and day < cutoff;
  get diagnostics deleted = row_count;
  if deleted < cardinality(distinct_rows) then
    delete from public.analytics_distinct_days
     where ctid = any (array(select ctid from public.analytics_distinct_days
                              where website_id = any (websites) and day < cutoff
                              limit cardinality(distinct_rows) - deleted));
    get diagnostics moved = row_count;
    deleted := deleted + moved;
  end if;
  total := total + deleted;

  delete from public.analytics_dimension_days where ctid = any (dimension_rows) and day < cutoff;
  get diagnostics deleted = row_count;
  if deleted < cardinality(dimension_rows) then
    delete from public.analytics_dimension_days
     where ctid = any (array(select ctid from public.analytics_dimension_days
                              where website_id = any (websites) and day < cutoff
                              limit cardinality(dimension_rows) - deleted));
    get diagnostics moved = row_count;
    deleted := deleted + moved;
  end if;
  total := total + deleted;

  delete from public.analytics_session_days where ctid = any (session_rows) and day < cutoff;
  get diagnostics deleted = row_count;
  if deleted < cardinality(session_rows) then
    delete from public.analytics_session_days
     where ctid = any (array(select ctid from public.analytics_session_days
                              where website_id = any (websites) and day < cutoff
                              limit cardinality(session_rows) - deleted));
    get diagnostics moved = row_count;
    deleted := deleted + moved;
  end if;
  return total + deleted;
end;
$$;

revoke all on function public.delete_analytics_members_before(date, integer) from public, anon, authenticated;
grant execute on function public.delete_analytics_members_before(date, integer) to service_role;
