-- The versions of the migrations applied to this database, for the API's
-- start-up check that the schema is not behind the code it runs
-- (src/plugins/db-schema.ts): a deploy that forgot its migrations answered
-- /health 200 while routes that need a newer table or function failed.
-- supabase_migrations belongs to the migration tool (the Supabase CLI, or
-- npm run migrate); the API's role gets this one list, not the schema.
create function public.applied_migration_versions()
returns setof text
language sql
stable
security definer
set search_path = ''
as $$
  select version from supabase_migrations.schema_migrations
$$;

revoke all on function public.applied_migration_versions() from public, anon, authenticated;
grant execute on function public.applied_migration_versions() to service_role;
