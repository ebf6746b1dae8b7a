-- Retention: raw analytics events older than a cut-off are deleted in small
-- batches (docs/analytics.md, "Retention", has the measurements behind that
-- choice). The rollups are not touched: they only ever follow inserts and
-- keep every day's figures exact after the events are gone.
--
-- Events stay append-only for everyone else. The guard trigger now also lets
-- a DELETE through when this function has marked its own transaction.

create or replace function public.refuse_analytics_event_changes()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if tg_op = 'DELETE' and pg_trigger_depth() > 1 then
    return null;
  end if;
  if tg_op = 'DELETE' and current_setting('analytics.retention_delete', true) = 'on' then
    return null;
  end if;
  raise exception 'analytics events are append-only (delete the website to remove its events)'
    using errcode = '55000';
end;
$$;

-- Deletes at most `batch_size` events created before `cutoff`; returns how
-- many. One short transaction per call: row locks on old rows only, which no
-- writer touches, and a few thousand dead tuples for autovacuum to reclaim.
-- The BRIN index on created_at leads the scan to the oldest block ranges.
create function public.delete_analytics_events_before(cutoff timestamptz, batch_size integer)
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
   where id in (select id from public.analytics_events where created_at < cutoff limit batch_size);
  get diagnostics deleted = row_count;
  perform set_config('analytics.retention_delete', 'off', true);
  return deleted;
end;
$$;

revoke all on function public.delete_analytics_events_before(timestamptz, integer) from public, anon, authenticated;
grant execute on function public.delete_analytics_events_before(timestamptz, integer) to service_role;
