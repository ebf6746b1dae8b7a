-- A cap on notification e-mails per hour across the deployment
-- (FEEDBACK_NOTIFICATIONS_PER_HOUR, docs/feedback.md "The hourly cap and the
-- digest"). Every submission made one e-mail to every admin, and the rate
-- limit is per address: many addresses flooded the admins and spent the mail
-- provider's daily quota, after which real notifications failed too. The
-- outbox is in the database and any instance may send, so the cap is
-- counted here: a claim takes an advisory lock, counts the e-mails claimed
-- in the last hour and stamps its own, so two instances never share out the
-- same room.

-- When the row was last claimed for an e-mail under the cap (null: never,
-- or given back unsent). The cap counts the e-mails (a notification alone,
-- or a digest) with a row claimed within the hour.
alter table public.feedback_outbox add column claimed_at timestamptz;

-- Notifications held back by the cap go out together, in a digest. Once
-- formed, a digest keeps its rows until it is sent or given up: a retry, or
-- another instance after a lease ran out, sends the same set under the same
-- idempotency key (less any feedback deleted meanwhile). Null for a
-- notification sent on its own.
alter table public.feedback_outbox add column digest_id uuid;

comment on column public.feedback_outbox.claimed_at is 'When a worker last claimed the row to send it under the hourly cap, which counts these.';
comment on column public.feedback_outbox.digest_id is 'The digest e-mail this notification is (or was) sent in; null when sent on its own.';

-- What the cap's count reads: the rows claimed within the hour.
create index feedback_outbox_claimed_at_idx on public.feedback_outbox (claimed_at)
  where claimed_at is not null;
