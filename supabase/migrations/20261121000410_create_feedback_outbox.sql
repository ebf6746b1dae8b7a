-- The transactional outbox of feedback notifications (SPEC section 6). A
-- trigger adds one row per new feedback inside the submitting transaction,
-- so a notification exists exactly when the feedback does, however the row
-- was inserted. The service's worker claims due rows with
-- `for update skip locked`, sends, and marks them sent (docs/feedback.md).

create table public.feedback_outbox (
  id uuid primary key default gen_random_uuid(),
  feedback_id uuid not null unique references public.feedback (id) on delete cascade,
  attempts integer not null default 0 check (attempts >= 0),
  -- When the row may next be claimed: now for a new row, a lease end while a
  -- worker holds it (a crashed worker's claim expires), the backoff after a failure.
  next_attempt_at timestamptz not null default now(),
  claim_token uuid,
  last_error text,
  provider_message_id text,
  sent_at timestamptz,
  gave_up_at timestamptz,
  created_at timestamptz not null default now(),
  constraint feedback_outbox_done_once check (sent_at is null or gave_up_at is null)
);

comment on table public.feedback_outbox is 'Notification e-mails owed for new feedback; only the service''s own connection reads it.';

-- What the worker's claim query scans: rows still owed, by due time.
create index feedback_outbox_due_idx on public.feedback_outbox (next_attempt_at)
  where sent_at is null and gave_up_at is null;

-- Runs as its owner: submitters may insert feedback but have no rights here.
create function public.enqueue_feedback_notification()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  insert into public.feedback_outbox (feedback_id) values (new.id);
  return new;
end;
$$;

revoke all on function public.enqueue_feedback_notification() from public, anon, authenticated;

create trigger feedback_enqueue_notification
  after insert on public.feedback
  for each row execute function public.enqueue_feedback_notification();

-- RLS on and no policy for anon or authenticated: the API roles can neither
-- see nor change the outbox; the worker uses the service's own connection.
alter table public.feedback_outbox enable row level security;

revoke all on table public.feedback_outbox from anon, authenticated;
grant all on table public.feedback_outbox to service_role;
