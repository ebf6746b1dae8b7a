-- The admin list's total without counting the table. Each page of
-- GET /api/feedback/get-feedback carries `pagination.total`, which was a
-- `count(*)` over every matching row: a cost that grows with the table, paid
-- by every page. Now a total is a sum over a few small rows, read in the
-- same snapshot as the page beside it:
--
-- - public.feedback_count_changes: every statement that inserts, updates or
--   deletes feedback appends what it changed, per status and website, in its
--   own transaction. Appending takes no lock another writer waits for.
-- - public.feedback_counts: one row per status and website. The same
--   statement then folds the changes committed so far into it, unless another
--   transaction is folding (then it leaves its own for the next one).
--
-- A total is the sum of both. Counter rows updated by every submission would
-- make concurrent submissions queue: each holds the row's lock until its
-- COMMIT comes back, a round trip through a busy server (tried: one row a
-- key, then 16 shards a key; docs/performance.md).

create table public.feedback_counts (
  status public.feedback_status not null,
  -- Not a foreign key: a deleted website's feedback moves to null through
  -- feedback's own `on delete set null`, and its count moves with it.
  website_id uuid,
  total bigint not null,
  constraint feedback_counts_status_website_key unique nulls not distinct (status, website_id)
);

create table public.feedback_count_changes (
  status public.feedback_status not null,
  website_id uuid,
  delta bigint not null
);

comment on table public.feedback_counts is
  'How many feedback rows have each status and website, with public.feedback_count_changes not yet folded in; kept by triggers on public.feedback. See docs/feedback.md.';
comment on table public.feedback_count_changes is
  'Changes to public.feedback_counts not yet folded in; kept by triggers on public.feedback. See docs/feedback.md.';

-- PL/pgSQL, so its statements' plans are kept for the session (a SQL
-- function's are made again on every call; see 20261123100000_has_role_plpgsql.sql).
create function public.count_feedback_changes()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  emptied_statuses public.feedback_status[];
  emptied_websites uuid[];
begin
  -- What the statement changed, per key; each transition table exists only
  -- for the operations that have it. An update that changes neither status
  -- nor website nets to nothing.
  if tg_op = 'INSERT' then
    insert into public.feedback_count_changes (status, website_id, delta)
    select status, website_id, count(*) from came group by status, website_id;
  elsif tg_op = 'DELETE' then
    insert into public.feedback_count_changes (status, website_id, delta)
    select status, website_id, -count(*) from gone group by status, website_id;
  else
    insert into public.feedback_count_changes (status, website_id, delta)
    select status, website_id, sum(delta)
      from (select status, website_id, 1 as delta from came
            union all
            select status, website_id, -1 from gone) as change
     group by status, website_id
    having sum(delta) <> 0;
  end if;

  -- One folder at a time; the others leave their changes for it. Only under
  -- read committed, where the delete below sees what an earlier folder
  -- removed (an older snapshot would fail on it).
  if current_setting('transaction_isolation') <> 'read committed'
     or not pg_try_advisory_xact_lock(hashtext('public.feedback_counts')) then
    return null;
  end if;

  with folded as (
    delete from public.feedback_count_changes returning status, website_id, delta
  ), added as (
    insert into public.feedback_counts as counted (status, website_id, total)
    select status, website_id, sum(delta) from folded
     group by status, website_id
    having sum(delta) <> 0
    on conflict (status, website_id) do update set total = counted.total + excluded.total
    returning status, website_id, total
  )
  select array_agg(status), array_agg(website_id) into emptied_statuses, emptied_websites
    from added where total = 0;

  -- A key no feedback has any more (a website's last feedback moved or deleted).
  if emptied_statuses is not null then
    delete from public.feedback_counts as counted
     using unnest(emptied_statuses, emptied_websites) as emptied (status, website_id)
     where counted.total = 0 and counted.status = emptied.status and counted.website_id is not distinct from emptied.website_id;
  end if;
  return null;
end;
$$;

create function public.forget_feedback_counts()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  delete from public.feedback_counts;
  delete from public.feedback_count_changes;
  return null;
end;
$$;

revoke all on function public.count_feedback_changes() from public, anon, authenticated, service_role;
revoke all on function public.forget_feedback_counts() from public, anon, authenticated, service_role;

-- No submission may slip in between the first count and the triggers.
-- Inside a `do` block: Supabase CLI 2.115 and later send a migration's
-- statements in one pipeline without BEGIN, where a top-level LOCK TABLE is
-- refused (25P01); within a block it runs, and holds to the migration's end,
-- under every runner (amended after it landed: scripts/stack/database.ts,
-- AMENDED_MIGRATIONS).
do $$
begin
  lock table public.feedback in share row exclusive mode;
end;
$$;

create trigger feedback_count_inserts
  after insert on public.feedback
  referencing new table as came
  for each statement execute function public.count_feedback_changes();

create trigger feedback_count_updates
  after update on public.feedback
  referencing old table as gone new table as came
  for each statement execute function public.count_feedback_changes();

create trigger feedback_count_deletes
  after delete on public.feedback
  referencing old table as gone
  for each statement execute function public.count_feedback_changes();

create trigger feedback_forget_counts
  after truncate on public.feedback
  for each statement execute function public.forget_feedback_counts();

insert into public.feedback_counts (status, website_id, total)
select status, website_id, count(*) from public.feedback group by status, website_id;

-- Read as the feedback is: admins only (and service_role, which bypasses
-- RLS, as on the analytics rollups); the API roles never write them, the
-- triggers above do as their owner.
alter table public.feedback_counts enable row level security;
alter table public.feedback_count_changes enable row level security;

revoke all on table public.feedback_counts, public.feedback_count_changes from anon, authenticated;
grant select on table public.feedback_counts, public.feedback_count_changes to authenticated;
grant all on table public.feedback_counts, public.feedback_count_changes to service_role;

create policy "Admins can read feedback counts"
  on public.feedback_counts for select
  to authenticated
  using ((select public.has_role('admin')));

create policy "Admins can read feedback count changes"
  on public.feedback_count_changes for select
  to authenticated
  using ((select public.has_role('admin')));
