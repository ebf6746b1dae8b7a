-- The admin list's total without counting the table. Each page of
-- GET /api/feedback/get-feedback carries `pagination.total`, which was a
-- `count(*)` over every matching row: a cost that grows with the table, paid
-- by every page. This table holds how many feedback rows have each status and
-- website, kept in the same transaction as the change by statement triggers
-- on public.feedback, so a total is a sum over a few small rows and reads the
-- same snapshot as the page beside it.
--
-- Each (status, website) is split over 16 shards, and a statement adds its
-- changes to one shard drawn at random. With one row per key, every
-- submission to a website updated the same row and held its lock until its
-- commit: concurrent submissions queued behind each other (a 60 s soak at
-- 100 submissions a second: p99 785 ms, against 29 ms before the counts). A
-- shard's total may go below zero (rows counted in one shard, removed through
-- another); the sum over a key's shards is what counts.

create table public.feedback_counts (
  status public.feedback_status not null,
  -- Not a foreign key: a deleted website's feedback moves to null through
  -- feedback's own `on delete set null`, and its count moves with it.
  website_id uuid,
  shard smallint not null check (shard between 0 and 15),
  total bigint not null,
  constraint feedback_counts_status_website_shard_key unique nulls not distinct (status, website_id, shard)
);

comment on table public.feedback_counts is
  'How many feedback rows have each status and website; kept by triggers on public.feedback. See docs/feedback.md.';

-- Adds a statement's changes to one shard: the keys its rows left (`gone`)
-- and the ones they arrived at (`came`). An update that changes neither
-- status nor website nets to nothing and touches no counter. Applied in key
-- order, so two statements on one shard take its row locks in the same order.
-- PL/pgSQL, so its statements' plans are kept for the session (a SQL
-- function's are made again on every call; see 20261123100000_has_role_plpgsql.sql).
create function public.count_feedback_changes()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  drawn_shard smallint := floor(random() * 16);
  came_statuses public.feedback_status[];
  came_websites uuid[];
  came_counts bigint[];
  gone_statuses public.feedback_status[];
  gone_websites uuid[];
  gone_counts bigint[];
begin
  -- Each transition table exists only for the operations that have it.
  if tg_op in ('INSERT', 'UPDATE') then
    select array_agg(status), array_agg(website_id), array_agg(how_many)
      into came_statuses, came_websites, came_counts
      from (select status, website_id, count(*) as how_many from came group by status, website_id) as grouped;
  end if;
  if tg_op in ('UPDATE', 'DELETE') then
    select array_agg(status), array_agg(website_id), array_agg(how_many)
      into gone_statuses, gone_websites, gone_counts
      from (select status, website_id, count(*) as how_many from gone group by status, website_id) as grouped;
  end if;

  insert into public.feedback_counts as counted (status, website_id, shard, total)
  select change.status, change.website_id, drawn_shard, sum(change.delta)
    from (
      select arrived.status, arrived.website_id, arrived.how_many
        from unnest(came_statuses, came_websites, came_counts) as arrived (status, website_id, how_many)
      union all
      select departed.status, departed.website_id, -departed.how_many
        from unnest(gone_statuses, gone_websites, gone_counts) as departed (status, website_id, how_many)
    ) as change (status, website_id, delta)
   group by change.status, change.website_id
  having sum(change.delta) <> 0
   order by change.status, change.website_id nulls first
  on conflict (status, website_id, shard) do update set total = counted.total + excluded.total;

  -- Shards that came to zero: a website's last feedback moved or deleted
  -- leaves no row behind, unless its shards net to zero between them (at
  -- most 16 rows a key). Only statements that removed rows can make one.
  if gone_statuses is not null then
    delete from public.feedback_counts as counted
     using unnest(gone_statuses, gone_websites) as departed (status, website_id)
     where counted.total = 0 and counted.status = departed.status and counted.website_id is not distinct from departed.website_id;
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
  return null;
end;
$$;

revoke all on function public.count_feedback_changes() from public, anon, authenticated, service_role;
revoke all on function public.forget_feedback_counts() from public, anon, authenticated, service_role;

-- No submission may slip in between the first count and the triggers.
lock table public.feedback in share row exclusive mode;

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

insert into public.feedback_counts (status, website_id, shard, total)
select status, website_id, 0, count(*) from public.feedback group by status, website_id;

-- Read as the feedback is: admins only (and service_role, which bypasses
-- RLS, as on the analytics rollups); the API roles never write it, the
-- triggers above do as their owner.
alter table public.feedback_counts enable row level security;

revoke all on table public.feedback_counts from anon, authenticated;
grant select on table public.feedback_counts to authenticated;
grant all on table public.feedback_counts to service_role;

create policy "Admins can read feedback counts"
  on public.feedback_counts for select
  to authenticated
  using ((select public.has_role('admin')));
