-- The platform's default privileges give anon and authenticated every right on
-- new sequences and functions in public. The identity sequences need none
-- (identity columns take their values without a sequence privilege), and
-- UPDATE is setval: resetting one makes the role-change and log writers fail
-- on duplicate keys. Trigger functions are called only as triggers.
-- tests/rls-attacks.test.ts checks every sequence and trigger function.

revoke all on sequence public.app_logs_id_seq, public.role_changes_id_seq from anon, authenticated;
revoke all on function public.touch_updated_at() from public, anon, authenticated;
