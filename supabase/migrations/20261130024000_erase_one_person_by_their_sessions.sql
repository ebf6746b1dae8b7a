-- Erasing one person's analytics takes that person's events, not other
-- people's (docs/analytics.md, "Erasing one person"). 20261130003000 grew
-- the ids until no new one turned up: from a session to its visitor hash,
-- from the hash to every other tab that shared it (another person behind the
-- same address and browser that day), from that tab to the user id its
-- person signed in with, and on to every day and device of that user. One
-- request could so delete much of a website on a shared mobile network, and
-- ingestion is unauthenticated, so anyone could forge such links.
--
-- The rule now has two steps and stops there:
--   1. the events carrying one of the given ids (user id as user_id or
--      visitor_id, visitor id, session id);
--   2. every event of the sessions those events belong to: a session is one
--      browser tab, so its events before sign-in (under the day's hash) and
--      past midnight (under the next day's) are the same person's.
-- A visitor hash or a user id met in step 2 is never followed to other
-- sessions. The visitor and session ids the erased events carry (and the
-- given ones) are renamed in the rollups as before: only names change, never
-- a count. A hash the person shared with someone else stays in that other
-- person's events, and that person's next event under it on the same day
-- starts a new member (counted as a new visitor); nothing of theirs is
-- deleted.
--
-- dry_run answers the same counts and changes nothing: it takes no lock (an
-- owner's check does not hold up ingestion), so an event that arrives between
-- it and the erasure itself can make the erasure's counts larger.
--
-- The old signature goes: the route and the tests call this one, whose
-- dry_run defaults to false (the old call still means the same). Grants as
-- before: service_role only.

drop function public.erase_analytics_person(uuid, text, text, text);

-- One row of counts: the events deleted, the visitor and session ids
-- renamed, and the member rows renamed (or, for a dry run, those that would
-- be). No row when the website is not there (never was, or its deletion has
-- begun). Unknown or already-erased ids give zeros: erasing twice is erasing
-- once.
create function public.erase_analytics_person(
  website uuid, person_user_id text, person_visitor_id text, person_session_id text, dry_run boolean default false)
returns table (events integer, visitors integer, sessions integer, member_rows integer)
language plpgsql
security definer
set search_path = ''
as $$
declare
  given_visitors text[] := array_remove(array[person_user_id, person_visitor_id], null);
  given_sessions text[] := array_remove(array[person_session_id], null);
  member_days date[];
  session_ids text[];
  visitor_ids text[];
  event_rows tid[];
  locked boolean := false;
  visitor_pseudonyms text[];
  session_pseudonyms text[];
  renamed integer;
begin
  if website is null then
    return;
  end if;
  if cardinality(given_visitors) + cardinality(given_sessions) = 0 then
    raise exception 'name the person by a user id, a visitor id or a session id' using errcode = '22023';
  end if;
  -- The locked round must see what the triggers committed while this call waited for their lock.
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'analytics must be erased under READ COMMITTED' using errcode = '25001';
  end if;
  if not exists (select 1 from public.websites w where w.id = website and w.deletion_started_at is null) then
    return;
  end if;

  -- The two steps, first without any lock (they read every event of the
  -- person's days, and the website's ingestion need not wait for them), then
  -- once more under the locks, which finds what came in between and the
  -- events to delete. A dry run stops after the first.
  loop
    -- Step 1: the sessions of the events carrying a given id, found through
    -- the days the member rows name (every event of an id lies on one of
    -- its member days: member rows outlive their days' events).
    select coalesce(array_agg(distinct day), '{}') into member_days
      from (select d.day from public.analytics_distinct_days d
             where d.website_id = website and d.kind = 'visitor' and d.member = any (given_visitors)
            union
            select s.day from public.analytics_session_days s
             where s.website_id = website and s.session_id = any (given_sessions)) as days;
    select coalesce(array_agg(distinct e.session_id), '{}') into session_ids
      from unnest(member_days) as d (day)
      join public.analytics_events e
        on e.website_id = website
       and e.created_at >= (d.day::timestamp at time zone 'UTC')
       and e.created_at < ((d.day + 1)::timestamp at time zone 'UTC')
     where e.visitor_id = any (given_visitors) or e.user_id = any (given_visitors) or e.session_id = any (given_sessions);
    session_ids := array(select distinct unnest(session_ids || given_sessions));
    -- Step 2: every event of those sessions, through the sessions' days. It
    -- holds step 1's events (each is in one of the sessions), and no event
    -- of another session: the ids met here are renamed, never followed.
    select coalesce(array_agg(distinct s.day), '{}') into member_days
      from public.analytics_session_days s
     where s.website_id = website and s.session_id = any (session_ids);
    select coalesce(array_agg(distinct e.visitor_id), '{}'), coalesce(array_agg(e.ctid), '{}')
      into visitor_ids, event_rows
      from unnest(member_days) as d (day)
      join public.analytics_events e
        on e.website_id = website
       and e.created_at >= (d.day::timestamp at time zone 'UTC')
       and e.created_at < ((d.day + 1)::timestamp at time zone 'UTC')
     where e.session_id = any (session_ids);
    exit when locked or dry_run;
    -- The rollup triggers' lock, then website deletion's, in that order, as
    -- delete_analytics_members_before takes them: no ingest for this website
    -- relinks a member while its rows are renamed, and no deletion batch runs.
    perform pg_advisory_xact_lock(hashtext('public.apply_analytics_rollups'), hashtext(website::text));
    perform pg_advisory_xact_lock(hashtext('public.delete_website_batch'), hashtext(website::text));
    locked := true;
    if not exists (select 1 from public.websites w where w.id = website and w.deletion_started_at is null) then
      return;
    end if;
  end loop;

  -- The events, unless a dry run: by address, as the round under the locks
  -- found them, with the condition again, so that an address another row
  -- took since (after retention deleted one and a vacuum freed it) deletes
  -- nothing of anyone else.
  if dry_run then
    events := cardinality(event_rows);
  else
    perform set_config('analytics.person_erasure', 'on', true);
    delete from public.analytics_events e
     where e.ctid = any (event_rows)
       and e.website_id = website
       and e.session_id = any (session_ids);
    get diagnostics events = row_count;
    perform set_config('analytics.person_erasure', 'off', true);
  end if;

  -- Only ids some member row holds are renamed (an id given but never
  -- stored, or already erased, is no one's); a given id whose events
  -- retention has deleted still has its member rows renamed.
  select coalesce(array_agg(distinct d.member), '{}') into visitor_ids
    from public.analytics_distinct_days d
   where d.website_id = website and d.kind = 'visitor' and d.member = any (visitor_ids || given_visitors);
  select coalesce(array_agg(distinct s.session_id), '{}') into session_ids
    from public.analytics_session_days s
   where s.website_id = website and s.session_id = any (session_ids);
  visitors := cardinality(visitor_ids);
  sessions := cardinality(session_ids);

  if dry_run then
    -- The rows the renames below would change, by the same conditions.
    select count(distinct t.ctid)::integer into member_rows
      from unnest(visitor_ids) as p (old_id)
      join public.analytics_distinct_days v
        on v.website_id = website and v.kind = 'visitor' and v.member = p.old_id
     cross join lateral (
       select distinct dd.dimension, dd.value from public.analytics_daily_dimensions dd
        where dd.website_id = website and dd.dimension in ('country', 'utm_source', 'utm_medium', 'utm_campaign')
          and dd.day = v.day) as seen
      join public.analytics_dimension_days t
        on t.website_id = website and t.dimension = seen.dimension and t.value = seen.value
       and t.visitor_id = p.old_id and t.day = v.day;
    member_rows := member_rows
      + (select count(*)::integer from public.analytics_distinct_days d
          where d.website_id = website and d.kind = 'visitor' and d.member = any (visitor_ids))
      + (select count(*)::integer from public.analytics_distinct_days d
          where d.website_id = website and d.kind in ('desktop', 'mobile', 'tablet') and d.member = any (session_ids))
      + (select count(*)::integer from public.analytics_session_days s
          where s.website_id = website and s.session_id = any (session_ids));
    return next;
    return;
  end if;

  visitor_pseudonyms := array(select gen_random_uuid()::text from unnest(visitor_ids));
  session_pseudonyms := array(select gen_random_uuid()::text from unnest(session_ids));

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

revoke all on function public.erase_analytics_person(uuid, text, text, text, boolean) from public, anon, authenticated;
grant execute on function public.erase_analytics_person(uuid, text, text, text, boolean) to service_role;
