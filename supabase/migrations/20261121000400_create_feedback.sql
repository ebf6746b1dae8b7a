-- Feedback (SPEC sections 2 and 3): anyone may submit it, only admins read
-- and triage it. Text columns hold HTML-escaped text (the service escapes
-- before storage), so the upper bounds allow for entity expansion (at most
-- 6 characters per input character, `"` becomes `&quot;`).

create type public.feedback_status as enum ('pending', 'resolved', 'archived');

create table public.feedback (
  id uuid primary key default gen_random_uuid(),
  name text not null check (char_length(name) between 2 and 600),
  email text not null check (char_length(email) between 3 and 1600),
  comment text not null check (char_length(comment) between 10 and 30000),
  rating smallint not null check (rating between 1 and 5),
  status public.feedback_status not null default 'pending',
  location text check (char_length(location) <= 12300),
  category text check (category in ('Bug Report', 'Feature Request', 'General Feedback')),
  -- A base64 image data URL of at most 5 MiB decoded (about 7 MB of text).
  screenshot text check (screenshot like 'data:image/%;base64,%' and octet_length(screenshot) <= 7100000),
  admin_notes text check (char_length(admin_notes) <= 30000),
  -- Free text, not a foreign key: the legacy admin token carries a userId
  -- that need not be an auth.users id.
  resolved_by text check (char_length(resolved_by) <= 1200),
  resolved_at timestamptz,
  website_id uuid references public.websites (id) on delete set null,
  created_at timestamptz not null default now(),
  updated_at timestamptz not null default now(),
  constraint feedback_resolution_matches_status check (
    (status <> 'pending' or (resolved_at is null and resolved_by is null))
    and (status <> 'resolved' or resolved_at is not null)
  )
);

comment on table public.feedback is 'Submitted feedback; text columns are HTML-escaped. See docs/feedback.md.';

-- The admin list: newest first, optionally by status or website.
create index feedback_created_at_idx on public.feedback (created_at desc, id desc);
create index feedback_status_created_at_idx on public.feedback (status, created_at desc, id desc);
create index feedback_website_id_created_at_idx on public.feedback (website_id, created_at desc, id desc);

create trigger feedback_touch_updated_at
  before update on public.feedback
  for each row execute function public.touch_updated_at();

alter table public.feedback enable row level security;

-- Supabase grants every API role everything by default; take it back and
-- grant per column. Submitters name only the submitted fields, so status and
-- the triage columns keep their defaults; they never get SELECT, which is
-- why the service generates the id instead of using `returning`.
revoke all on table public.feedback from anon, authenticated;
grant insert (id, name, email, comment, rating, location, category, screenshot, website_id)
  on table public.feedback to anon, authenticated;
grant select on table public.feedback to authenticated;
grant update (status, admin_notes, resolved_by, resolved_at) on table public.feedback to authenticated;
grant all on table public.feedback to service_role;

create policy "Anyone can submit pending feedback"
  on public.feedback for insert
  to anon, authenticated
  with check (status = 'pending' and admin_notes is null and resolved_by is null and resolved_at is null);

create policy "Admins can read feedback"
  on public.feedback for select
  to authenticated
  using ((select public.has_role('admin')));

create policy "Admins can update feedback"
  on public.feedback for update
  to authenticated
  using ((select public.has_role('admin')))
  with check ((select public.has_role('admin')));
