-- The admin list's total without counting the table. Each page of
-- GET /api/feedback/get-feedback carries `pagination.total`, which was a
-- `count(*)` over every matching row: a cost that grows with the table, paid
-- by every page. This table holds how many feedback rows have each status and
-- website, kept in the same transaction as the change by statement triggers
-- on public.feedback, so a total is a sum over a few small rows and reads the
-- same snapshot as the page beside it.

create table public.feedback_counts (
  status public.feedback_status not null,
  -- Not a foreign key: a deleted website's feedback moves to null through
  -- feedback's own `on delete set null`, and its count moves with it.
  website_id uuid,
  total bigint not null,
  constraint feedback_counts_status_website_key unique nulls not distinct (status, website_id)
);

comment on table public.feedback_counts is
  'How many feedback rows have each status and website; kept by triggers on public.feedback. See docs/feedback.md.';

-- Adds the statement's changes: the keys its rows left (`gone`) and the ones
-- they arrived at (`came`), as parallel arrays of status, website and rows.
-- An update that changes neither status nor website nets to nothing and
-- touches no counter. Applied in key order, so concurrent statements take the
-- counters' row locks in one order and never deadlock on them.
create function public.add_feedback_counts(
  came_statuses public.feedback_status[], came_websites uuid[], came_counts bigint[],
  gone_statuses public.feedback_status[], gone_websites uuid[], gone_counts bigint[]
)
returns void
language sql
security definer
set search_path = ''
as $$
  insert into public.feedback_counts as counted (status, website_id, total)
  select status, website_id, sum(delta)
    from (
      select * from unnest(came_statuses, came_websites, came_counts)
      union all
      select status, website_id, -how_many from unnest(gone_statuses, gone_websites, gone_counts) as gone (status, website_id, how_many)
    ) as change (status, website_id, delta)
   group by status, website_id
  having sum(delta) <> 0
   order by status, website_id nulls first
  on conflict (status, website_id) do update set total = counted.total + excluded.total;

  -- A key no row has any more (a website's last feedback moved or deleted).
  delete from public.feedback_counts where total = 0;
$$;

create function public.count_feedback_changes()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
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
  perform public.add_feedback_counts(came_statuses, came_websites, came_counts, gone_statuses, gone_websites, gone_counts);
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

revoke all on function public.add_feedback_counts(public.feedback_status[], uuid[], bigint[], public.feedback_status[], uuid[], bigint[])
  from public, anon, authenticated, service_role;
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

insert into public.feedback_counts (status, website_id, total)
select status, website_id, count(*) from public.feedback group by status, website_id;

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
