-- The admin list's deep pages and status filters read from the creation
-- indexes alone (src/modules/feedback/queries.ts, listFeedback). Under
-- row-level security PostgreSQL never uses `status = …` in an index condition
-- (the enum comparison is not leakproof, so it runs after the policy, row by
-- row), and feedback_status_created_at_idx goes unused by the API. A page
-- 10,000 rows deep, or of a status the newest rows lack, read every row it
-- skipped from the table: on a million rows, 0.7 to 2.1 s at an offset of
-- 500,000 and up to 1 s at 10,000. With status and website carried in the
-- creation indexes, the page's ids come from an index-only scan that checks
-- the status on the index entry, and only the page's rows are read.
--
-- Each index is built beside the one it replaces, which then goes, and takes
-- its name. Built in the migration's transaction, not concurrently: about 2 s
-- each on a million rows, while writes to feedback wait.

create index feedback_created_at_status_website_idx
  on public.feedback (created_at desc, id desc) include (status, website_id);
drop index public.feedback_created_at_idx;
alter index public.feedback_created_at_status_website_idx rename to feedback_created_at_idx;

create index feedback_website_id_created_at_status_idx
  on public.feedback (website_id, created_at desc, id desc) include (status);
drop index public.feedback_website_id_created_at_idx;
alter index public.feedback_website_id_created_at_status_idx rename to feedback_website_id_created_at_idx;
