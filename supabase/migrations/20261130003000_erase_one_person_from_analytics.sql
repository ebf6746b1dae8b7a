-- Erasing one person's analytics on one website (a GDPR erasure request to
-- the website's owner; docs/analytics.md, "Erasing one person"). Events were
-- append-only and the rollups' member rows kept the person's ids until
-- retention, 13 months on.
--
-- The person is named by any of the site's `userId` (stored as user_id, and
-- as visitor_id), a stored visitor id, or a session id (the tracker keeps it
-- in the tab). Their events are every event carrying one of those ids, and
-- every event of the sessions and visitor ids those events carry, until no
-- more are found: a session is one browser tab, so its events before sign-in
-- and after midnight (under other visitor hashes) are the same person's.
--
-- Effect, in one transaction under the rollup triggers' per-website lock:
-- the events are deleted, and every rollup member row of those visitor and
-- session ids is renamed to a fresh random pseudonym (gen_random_uuid: not
-- derived from the old id), one pseudonym per old id. Only names change:
-- every day, prev_day, next_day, time and count stays, so the daily totals
-- built from the member rows (which hold no ids) stay as they are, and every
-- figure of every range with them. The old ids then match no row: an event
-- that comes with one later starts a new member (prev_day -infinity).
--
-- The events are found through the days the member rows name (their primary
-- keys lead with the website and the id), then the events index on
-- (website_id, created_at) for those days only: member rows outlive the
-- events of their days (retention deletes them at the same cut-off or an
-- earlier one), so every event of an id lies on one of its member days.
-- Those reads cost the person's days (every event of each), so they are done
-- first without the lock, and the lock is held for one more round and the
-- writes.

-- Events stay append-only for everyone else: the guard also lets a DELETE
-- through when erase_analytics_person has marked its own transaction. The
-- rest is the function as 20261124000100 made it.
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
  if tg_op = 'DELETE' and current_setting('analytics.person_erasure', true) = 'on' then
    return null;
  end if;
  raise exception 'analytics events are append-only (delete the website to remove its events)'
    using errcode = '55000';
end;
$$;

-- One row of counts: the events deleted, the visitor and session ids
-- renamed, and the member rows renamed. No row when the website is not there
-- (never was, or its deletion has begun). Unknown or already-erased ids give
-- zeros: erasing twice is erasing once.
create function public.erase_analytics_person(website uuid, person_user_id text, person_visitor_id text, person_session_id text)
returns table (events integer, visitors integer, sessions integer, member_rows integer)
language plpgsql
security definer
set search_path = ''
as $$
declare
  visitor_ids text[] := array_remove(array[person_user_id, person_visitor_id], null);
  session_ids text[] := array_remove(array[person_session_id], null);
  member_days date[];
  found_visitors text[];
  found_sessions text[];
  event_rows tid[];
  locked boolean := false;
  visitor_pseudonyms text[];
  session_pseudonyms text[];
  renamed integer;
begin
  if website is null then
    return;
  end if;
  if cardinality(visitor_ids) + cardinality(session_ids) = 0 then
    raise exception 'name the person by a user id, a visitor id or a session id' using errcode = '22023';
  end if;
  -- Each step must see what the triggers committed while this call waited for their lock.
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'analytics must be erased under READ COMMITTED' using errcode = '25001';
  end if;

  -- The person's ids, grown until a round finds no new one: first without
  -- any lock (these rounds read every event of the person's days, and the
  -- website's ingestion need not wait for them), then once more under the
  -- locks, which finds what was linked in between (usually nothing) and the
  -- events to delete.
  loop
    select coalesce(array_agg(distinct day), '{}') into member_days
      from (select d.day from public.analytics_distinct_days d
             where d.website_id = website and d.kind = 'visitor' and d.member = any (visitor_ids)
            union
            select s.day from public.analytics_session_days s
             where s.website_id = website and s.session_id = any (session_ids)) as days;
    select coalesce(array_agg(distinct e.visitor_id), '{}'), coalesce(array_agg(distinct e.session_id), '{}'),
           coalesce(array_agg(e.ctid), '{}')
      into found_visitors, found_sessions, event_rows
      from unnest(member_days) as d (day)
      join public.analytics_events e
        on e.website_id = website
       and e.created_at >= (d.day::timestamp at time zone 'UTC')
       and e.created_at < ((d.day + 1)::timestamp at time zone 'UTC')
     where e.visitor_id = any (visitor_ids) or e.user_id = any (visitor_ids) or e.session_id = any (session_ids);
    if found_visitors <@ visitor_ids and found_sessions <@ session_ids then
      exit when locked;
      -- The rollup triggers' lock, then website deletion's, in that order, as
      -- delete_analytics_members_before takes them: no ingest for this website
      -- relinks a member while its rows are renamed, and no deletion batch runs.
      perform pg_advisory_xact_lock(hashtext('public.apply_analytics_rollups'), hashtext(website::text));
      perform pg_advisory_xact_lock(hashtext('public.delete_website_batch'), hashtext(website::text));
      locked := true;
      if not exists (select 1 from public.websites w where w.id = website and w.deletion_started_at is null) then
        return;
      end if;
    else
      visitor_ids := array(select distinct unnest(visitor_ids || found_visitors));
      session_ids := array(select distinct unnest(session_ids || found_sessions));
    end if;
  end loop;

  -- By address, as the round under the locks found them; the conditions
  -- again, so that an address another row took since (after retention
  -- deleted one and a vacuum freed it) deletes nothing of anyone else.
  perform set_config('analytics.person_erasure', 'on', true);
  delete from public.analytics_events e
   where e.ctid = any (event_rows)
     and e.website_id = website
     and (e.visitor_id = any (visitor_ids) or e.user_id = any (visitor_ids) or e.session_id = any (session_ids));
  get diagnostics events = row_count;
  perform set_config('analytics.person_erasure', 'off', true);

  -- Only ids some member row holds get a pseudonym (an id given but never
  -- stored, or already erased, is no one's).
  select coalesce(array_agg(distinct d.member), '{}') into visitor_ids
    from public.analytics_distinct_days d
   where d.website_id = website and d.kind = 'visitor' and d.member = any (visitor_ids);
  select coalesce(array_agg(distinct s.session_id), '{}') into session_ids
    from public.analytics_session_days s
   where s.website_id = website and s.session_id = any (session_ids);
  visitor_pseudonyms := array(select gen_random_uuid()::text from unnest(visitor_ids));
  session_pseudonyms := array(select gen_random_uuid()::text from unnest(session_ids));
  visitors := cardinality(visitor_ids);
  sessions := cardinality(session_ids);

  -- A visitor's dimension rows are on its own days, with values that day's
  -- totals hold: probed by their whole primary key, read before the
  -- visitor's rows are renamed below.
  update public.analytics_dimension_days t set visitor_id = p.pseudonym
    from unnest(visitor_ids, visitor_pseudonyms) as p (old_id, pseudonym)
    join public.analytics_distinct_days v
      on v.website_id = website and v.kind = 'visitor' and v.member = p.old_id
    cross join lateral (
      select distinct dd.dimension, dd.value from public.analytics_daily_dimensions dd
       where dd.website_id = website and dd.dimension in ('country', 'utm_source', 'utm_medium', 'utm_campaign')
         and dd.day = v.day) as seen
   where t.website_id = website and t.dimension = seen.dimension and t.value = seen.value
     and t.visitor_id = p.old_id and t.day = v.day;
  get diagnostics member_rows = row_count;
  update public.analytics_distinct_days d set member = p.pseudonym
    from unnest(visitor_ids, visitor_pseudonyms) as p (old_id, pseudonym)
   where d.website_id = website and d.kind = 'visitor' and d.member = p.old_id;
  get diagnostics renamed = row_count;
  member_rows := member_rows + renamed;
  update public.analytics_distinct_days d set member = p.pseudonym
    from unnest(session_ids, session_pseudonyms) as p (old_id, pseudonym),
         unnest(array['desktop', 'mobile', 'tablet']) as k (kind)
   where d.website_id = website and d.kind = k.kind and d.member = p.old_id;
  get diagnostics renamed = row_count;
  member_rows := member_rows + renamed;
  update public.analytics_session_days s set session_id = p.pseudonym
    from unnest(session_ids, session_pseudonyms) as p (old_id, pseudonym)
   where s.website_id = website and s.session_id = p.old_id;
  get diagnostics renamed = row_count;
  member_rows := member_rows + renamed;
  return next;
end;
$$;

revoke all on function public.erase_analytics_person(uuid, text, text, text) from public, anon, authenticated;
grant execute on function public.erase_analytics_person(uuid, text, text, text) to service_role;
