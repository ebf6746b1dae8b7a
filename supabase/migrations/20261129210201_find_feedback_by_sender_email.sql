-- The admin list and export filter by the sender's address
-- (GET /api/feedback/get-feedback?email=…), case-insensitively, to find every
-- item of one person for an erasure request.
--
-- An index on lower(email) goes unused by the API: under row-level security
-- PostgreSQL runs a condition on a function that is not leakproof (lower is
-- not) after the policy, row by row, never as an index condition. At 30,000
-- rows that was a scan of the whole table for the page and another for its
-- total, 25 to 50 ms each. A stored column holds the folded address, and its
-- comparison (text equality, leakproof) is an index condition: 0.5 ms.
--
-- The address is stored HTML-escaped (src/modules/feedback/stored-text.ts),
-- so the column folds the escaped form, and the API escapes the address it is
-- asked for the same way before it compares.
--
-- Adding a stored generated column rewrites the table, screenshots included,
-- while submissions wait; as 20261123000100 did.

alter table public.feedback
  add column email_lowercase text generated always as (lower(email)) stored;

comment on column public.feedback.email_lowercase is 'lower(email), the HTML-escaped address folded; what the admin list''s email filter compares.';

create index feedback_email_lowercase_created_at_idx
  on public.feedback (email_lowercase, created_at desc, id desc);
