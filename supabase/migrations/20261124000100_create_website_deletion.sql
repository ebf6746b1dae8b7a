-- Deleting a website in steps (docs/analytics.md, "Deleting a website"). A
-- website with millions of events cannot go in one statement under the API's
-- statement timeout, and one long transaction would keep its key working and
-- hold its row lock (stalling every ingest batch that names it) until the end.
--
-- 1. begin_website_deletion, in the admin's own short transaction: the website
--    is marked, its key hash replaced, and readers stop seeing it. From that
--    commit the key opens nothing and the website is gone from the API.
-- 2. delete_website_batch, called until it returns 0: each call is one short
--    transaction deleting a batch of the website's events, then of its rollups,
--    and at last the website row itself.
--
-- A process that stops between the two leaves a marked website: invisible and
-- keyless, never half deleted yet usable; the next DELETE, or the next start
-- of a server, finishes it.

alter table public.websites add column deletion_started_at timestamptz;

comment on column public.websites.deletion_started_at is
  'Set by begin_website_deletion; the website is invisible and keyless while delete_website_batch removes it.';

-- Only begin_website_deletion sets the mark (and replaces the key hash):
-- callers keep UPDATE on the columns the API edits, and no other.
revoke update on table public.websites from authenticated;
grant update (name, domain, settings, metadata) on table public.websites to authenticated;

drop policy "Viewers, editors and admins can read websites" on public.websites;

create policy "Viewers, editors and admins can read websites not being deleted"
  on public.websites for select
  to authenticated
  using (
    deletion_started_at is null
    and ((select public.has_role('viewer')) or (select public.has_role('editor')) or (select public.has_role('admin')))
  );

-- Marks `website` for deletion as its caller: admins only (the service role,
-- which the legacy admin token uses, too), as the delete policy says. True
-- when the website exists, whether its deletion began now or earlier.
create function public.begin_website_deletion(website uuid)
returns boolean
language plpgsql
security definer
set search_path = ''
as $$
begin
  if not ((select auth.role()) = 'service_role' or (select public.has_role('admin'))) then
    raise exception 'only admins may delete websites' using errcode = '42501';
  end if;
  -- A new random hash: the old key matches nothing from this commit on.
  update public.websites
     set deletion_started_at = coalesce(deletion_started_at, now()),
         api_key_hash = sha256(uuid_send(gen_random_uuid()))
   where id = website;
  return found;
end;
$$;

revoke all on function public.begin_website_deletion(uuid) from public, anon, authenticated;
grant execute on function public.begin_website_deletion(uuid) to authenticated, service_role;

-- Events stay append-only for everyone else: the guard also lets a DELETE
-- through when delete_website_batch has marked its own transaction.
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
  if tg_op = 'DELETE' and current_setting('analytics.website_deletion', true) = 'on' then
    return null;
  end if;
  raise exception 'analytics events are append-only (delete the website to remove its events)'
    using errcode = '55000';
end;
$$;

-- Deletes at most `batch_size` rows of a website whose deletion has begun:
-- from the first of its tables that still has some (events first, then the
-- rollups), or, when none has, the website row itself. Returns how many rows
-- it deleted; 0 once the website is gone (or was never marked). Each call is
-- one short transaction; the primary keys, all led by website_id, find the rows.
-- Events written meanwhile (already queued when the key went) are caught by a
-- later call, or by the cascade of the last one.
create function public.delete_website_batch(website uuid, batch_size integer)
returns integer
language plpgsql
security definer
set search_path = ''
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
  -- Anything another table still holds goes by the cascade.
  delete from public.websites where id = website;
  get diagnostics deleted = row_count;
  return deleted;
end;
$$;

revoke all on function public.delete_website_batch(uuid, integer) from public, anon, authenticated;
grant execute on function public.delete_website_batch(uuid, integer) to service_role;
