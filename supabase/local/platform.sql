-- What the Supabase platform provides in every project database before any
-- migration of ours runs: the API roles, the auth schema owned by the auth
-- server's role, the JWT helper functions, and Supabase's default grants.
-- Hosted Supabase and `supabase start` already have all of this; the local
-- stack (scripts/stack.ts) applies it to a plain PostgreSQL database.
--
-- Roles are cluster-wide and several test databases may be created at the
-- same moment, so each role is created in its own block that tolerates a
-- concurrent creator.

do $$ begin create role anon nologin noinherit;
exception when duplicate_object or unique_violation then null; end $$;
do $$ begin create role authenticated nologin noinherit;
exception when duplicate_object or unique_violation then null; end $$;
do $$ begin create role service_role nologin noinherit bypassrls;
exception when duplicate_object or unique_violation then null; end $$;
do $$ begin create role supabase_auth_admin noinherit createrole login noreplication;
exception when duplicate_object or unique_violation then null; end $$;
do $$ begin create role authenticator noinherit login;
exception when duplicate_object or unique_violation then null; end $$;

grant anon, authenticated, service_role to authenticator;
alter role supabase_auth_admin set search_path = auth;
alter role anon set statement_timeout = '3s';
alter role authenticated set statement_timeout = '8s';

create schema if not exists extensions;
create extension if not exists pgcrypto with schema extensions;
grant usage on schema extensions to postgres, anon, authenticated, service_role;

-- Supabase grants every API role everything on new public objects and relies
-- on row-level security; our migrations revoke and grant explicitly.
grant usage on schema public to postgres, anon, authenticated, service_role;
alter default privileges in schema public grant all on tables to postgres, anon, authenticated, service_role;
alter default privileges in schema public grant all on functions to postgres, anon, authenticated, service_role;
alter default privileges in schema public grant all on sequences to postgres, anon, authenticated, service_role;

create schema if not exists auth authorization supabase_auth_admin;
grant usage on schema auth to anon, authenticated, service_role;
grant all on schema auth to supabase_auth_admin;
grant all on schema auth to postgres;

-- The first generation of the auth tables, as the Supabase Postgres image
-- ships them; the auth server's own migrations (`auth migrate`) extend them.
set role supabase_auth_admin;

create table if not exists auth.users (
  instance_id uuid,
  id uuid not null primary key,
  aud varchar(255),
  role varchar(255),
  email varchar(255) unique,
  encrypted_password varchar(255),
  confirmed_at timestamptz,
  invited_at timestamptz,
  confirmation_token varchar(255),
  confirmation_sent_at timestamptz,
  recovery_token varchar(255),
  recovery_sent_at timestamptz,
  email_change_token varchar(255),
  email_change varchar(255),
  email_change_sent_at timestamptz,
  last_sign_in_at timestamptz,
  raw_app_meta_data jsonb,
  raw_user_meta_data jsonb,
  is_super_admin boolean,
  created_at timestamptz,
  updated_at timestamptz
);
create index if not exists users_instance_id_email_idx on auth.users (instance_id, email);
create index if not exists users_instance_id_idx on auth.users (instance_id);

create table if not exists auth.refresh_tokens (
  instance_id uuid,
  id bigserial primary key,
  token varchar(255),
  user_id varchar(255),
  revoked boolean,
  created_at timestamptz,
  updated_at timestamptz
);
create index if not exists refresh_tokens_instance_id_idx on auth.refresh_tokens (instance_id);
create index if not exists refresh_tokens_instance_id_user_id_idx on auth.refresh_tokens (instance_id, user_id);
create index if not exists refresh_tokens_token_idx on auth.refresh_tokens (token);

create table if not exists auth.instances (
  id uuid primary key,
  uuid uuid,
  raw_base_config text,
  created_at timestamptz,
  updated_at timestamptz
);

create table if not exists auth.audit_log_entries (
  instance_id uuid,
  id uuid primary key,
  payload json,
  created_at timestamptz
);
create index if not exists audit_logs_instance_id_idx on auth.audit_log_entries (instance_id);

create table if not exists auth.schema_migrations (version varchar(255) primary key);
-- The auth server skips the migrations that created the tables above.
insert into auth.schema_migrations (version) values
  ('20171026211738'), ('20171026211808'), ('20171026211834'), ('20180103212743'),
  ('20180108183307'), ('20180119214651'), ('20180125194653')
on conflict do nothing;

-- The helpers that policies call. They read the claims that PostgREST, and
-- our data path (src/plugins/db.ts), put in `request.jwt.claims`; the
-- single-claim settings are the older form and still honoured.
create or replace function auth.jwt() returns jsonb
language sql stable
as $$
  select coalesce(
    nullif(current_setting('request.jwt.claim', true), ''),
    nullif(current_setting('request.jwt.claims', true), '')
  )::jsonb
$$;

create or replace function auth.uid() returns uuid
language sql stable
as $$
  select coalesce(
    nullif(current_setting('request.jwt.claim.sub', true), ''),
    (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
  )::uuid
$$;

create or replace function auth.role() returns text
language sql stable
as $$
  select coalesce(
    nullif(current_setting('request.jwt.claim.role', true), ''),
    (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'role')
  )::text
$$;

create or replace function auth.email() returns text
language sql stable
as $$
  select coalesce(
    nullif(current_setting('request.jwt.claim.email', true), ''),
    (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'email')
  )::text
$$;

reset role;

grant execute on function auth.jwt(), auth.uid(), auth.role(), auth.email()
  to anon, authenticated, service_role;
