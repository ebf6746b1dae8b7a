-- The notification worker fills half of each batch with the newest due rows,
-- so a backlog of old notifications never holds a new one back; this index
-- serves that half as feedback_outbox_due_idx serves the oldest half.
create index feedback_outbox_newest_due_idx on public.feedback_outbox (created_at desc)
  where sent_at is null and gave_up_at is null;
