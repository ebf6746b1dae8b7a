-- app_logs.user_id references auth.users on delete set null, and Postgres
-- does not index a foreign key's referencing column on its own: deleting an
-- account looked for that user's entries by reading the whole log table
-- (140 ms at 1M rows, growing with it). Partial, because most entries are
-- the server's own with no user: the index holds only client entries, and the
-- lookup (`user_id = $1`) implies `user_id is not null`, so it can use it.

create index app_logs_user_id_idx on public.app_logs (user_id) where user_id is not null;
