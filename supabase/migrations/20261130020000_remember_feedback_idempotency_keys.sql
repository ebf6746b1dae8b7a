-- Idempotency-Key on POST /api/feedback (docs/feedback.md, "Retrying a
-- submission"). A client whose answer was lost sends the same request again;
-- without a key each retry stored another row and sent the admins another
-- e-mail. A key is remembered here for 24 hours: first as a claim (the
-- request is in progress), then with the answer it got, which a retry with
-- the same key and body is given again.
--
-- The key's row is claimed by the server's own connection before the bot
-- check. The answer is written by a trigger on the feedback insert, so the
-- row and its answer commit together: never an answer without its row, nor
-- a row whose retry would store it again. The submitter (anon) has no rights
-- here; the trigger runs as its owner.

create table public.feedback_idempotency_keys (
  -- SHA-256 of the client's rate-limit subject and the key: one client cannot
  -- reach another's answer, and neither the address nor the key is stored.
  scoped_key bytea primary key,
  -- SHA-256 of the request as parsed, less the bot check's one-use token.
  request_hash bytea not null,
  -- Which attempt holds the claim: only it may record the answer or give it back.
  claim_id uuid not null,
  claimed_at timestamptz not null default now(),
  -- The answer: its status and the data of its body ({id, status}), never the submitted text.
  answer_status smallint,
  answer_data jsonb,
  -- Gone with the feedback it answered (an erasure request deletes the row).
  feedback_id uuid references public.feedback (id) on delete cascade,
  constraint feedback_idempotency_keys_answered_whole check ((answer_status is null) = (answer_data is null)),
  constraint feedback_idempotency_keys_hash_sizes check (octet_length(scoped_key) = 32 and octet_length(request_hash) = 32)
);

comment on table public.feedback_idempotency_keys is
  'Idempotency-Key claims and answers of feedback submissions, kept 24 hours; only the service''s own connection and the feedback trigger use it.';

-- What the periodic delete of keys older than 24 hours reads.
create index feedback_idempotency_keys_claimed_at_idx on public.feedback_idempotency_keys (claimed_at);
-- What deleting a feedback row looks up (its foreign key).
create index feedback_idempotency_keys_feedback_id_idx on public.feedback_idempotency_keys (feedback_id);

-- RLS on and no policy for anon or authenticated: the API roles can neither
-- see nor change the keys. The one policy names the service's own role, which
-- bypasses RLS anyway; it says who the table is for (the database advisors
-- flag a table under RLS with no policy at all).
alter table public.feedback_idempotency_keys enable row level security;

-- Supabase's default privileges give a new table ALL for every API role: the
-- service keeps the rows' rights only (20261129100100_service_role_keeps_to_rows.sql).
revoke all on table public.feedback_idempotency_keys from public, anon, authenticated, service_role;
grant select, insert, update, delete on table public.feedback_idempotency_keys to service_role;

create policy "The service keeps feedback idempotency keys"
  on public.feedback_idempotency_keys for all
  to service_role
  using (true)
  with check (true);

-- Records the answer to the attempt that claimed the key. The submission's
-- transaction names the key and its claim in two settings of its own
-- (set_config(..., true), gone at its end); a submission without a key sets
-- neither and is left alone. A claim taken over meanwhile (its attempt
-- stalled past the in-progress limit and a retry claimed the key) refuses
-- the insert, so the key never answers for two rows.
create function public.record_feedback_idempotent_answer()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  named_key text := nullif(current_setting('feedback_idempotency.scoped_key', true), '');
  named_claim text := nullif(current_setting('feedback_idempotency.claim_id', true), '');
begin
  if named_key is null or named_claim is null then
    return new;
  end if;
  update public.feedback_idempotency_keys k
     set answer_status = 201,
         answer_data = jsonb_build_object('id', new.id, 'status', new.status),
         feedback_id = new.id
   where k.scoped_key = decode(named_key, 'hex')
     and k.claim_id = named_claim::uuid
     and k.answer_status is null;
  if not found then
    raise exception 'feedback idempotency claim lost' using errcode = 'P0001', hint = 'feedback_idempotency_claim_lost';
  end if;
  return new;
end;
$$;

revoke all on function public.record_feedback_idempotent_answer() from public, anon, authenticated;

create trigger feedback_record_idempotent_answer
  after insert on public.feedback
  for each row execute function public.record_feedback_idempotent_answer();
