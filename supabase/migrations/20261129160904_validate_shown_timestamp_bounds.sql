-- The rows already there, checked against the bounds 20261129160903 added
-- NOT VALID. VALIDATE CONSTRAINT locks each table SHARE UPDATE EXCLUSIVE:
-- reads and writes, sign-ins among them, go on while its rows are checked
-- (only schema changes and VACUUM wait). A row out of range (typed by hand:
-- the API writes none) stops this migration, naming the check (SQLSTATE
-- 23514); docs/admin.md, "Rows edited in the Supabase dashboard", says how
-- to find and mend such rows before running the migrations again.

alter table public.profiles
  validate constraint profiles_created_at_in_range,
  validate constraint profiles_last_login_in_range,
  validate constraint profiles_updated_at_in_range;

alter table public.feedback
  validate constraint feedback_created_at_in_range,
  validate constraint feedback_updated_at_in_range,
  validate constraint feedback_resolved_at_in_range;

alter table public.websites
  validate constraint websites_created_at_in_range,
  validate constraint websites_updated_at_in_range,
  validate constraint websites_deletion_started_at_in_range;

alter table public.app_logs
  validate constraint app_logs_created_at_in_range;
