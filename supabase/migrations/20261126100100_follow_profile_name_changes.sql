-- The profile's name follows a name the auth server's user metadata is given
-- after sign-up: an admin editing user_metadata.name in the dashboard (the
-- admin API), or the user through the auth server's own PUT /user. Before,
-- only e-mail and sign-in time followed, and such a rename never reached
-- /api/auth/me, /api/users or the admins' list.
--
-- Names taken from the metadata obey the API's own rule (NameSchema): trimmed
-- of the whitespace JavaScript's trim() removes (trim() in SQL removes spaces
-- only, so ' \tA\n' passed the length check with one visible character),
-- then 2 to 100 characters. A new account's name is the first candidate that
-- obeys it (name, full_name, the e-mail's local part), else 'user'; a rename
-- that does not obey it is not followed (the profile keeps its name). Names
-- are stored as given, HTML and all, as PUT /api/users/:id stores them: the
-- API answers JSON, and escaping is the page's job.
--
-- Not a rename: an identity provider's own name. The auth server copies the
-- provider's claims (`name` among them) into the metadata at every sign-in
-- with that provider and when an identity is linked (POST /api/auth/link),
-- after writing them to the identity; a name one of the user's identities
-- reports is therefore the provider's, and a name the user chose through our
-- API stays.

create function public.profile_name(candidate jsonb)
returns text
language sql
immutable
set search_path = ''
as $$
  select case when char_length(trimmed) between 2 and 100 then trimmed end
    from (
      select btrim(candidate #>> '{}',
                   E' \t\n\u000b\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff') as trimmed
       where jsonb_typeof(candidate) = 'string'
    ) as given;
$$;

comment on function public.profile_name(jsonb) is 'A JSON string as a profile name: trimmed as JavaScript trims, 2 to 100 characters, else null.';

revoke all on function public.profile_name(jsonb) from public, anon, authenticated;

create or replace function public.handle_new_auth_user()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
begin
  insert into public.profiles (id, email, name, created_at, last_login)
  values (
    new.id,
    coalesce(new.email, ''),
    coalesce(
      public.profile_name(new.raw_user_meta_data -> 'name'),
      public.profile_name(new.raw_user_meta_data -> 'full_name'),
      public.profile_name(to_jsonb(split_part(coalesce(new.email, ''), '@', 1))),
      'user'
    ),
    coalesce(new.created_at, now()),
    new.last_sign_in_at
  );
  return new;
end;
$$;

revoke all on function public.handle_new_auth_user() from public, anon, authenticated;

create function public.handle_renamed_auth_user()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  chosen text := public.profile_name(new.raw_user_meta_data -> 'name');
begin
  if chosen is null then
    return new;
  end if;
  -- Nested: the first generation of the auth tables (the local stack without
  -- an auth server) has no auth.identities, and the query is planned only
  -- when it is reached.
  if to_regclass('auth.identities') is not null then
    if exists (
      select 1 from auth.identities i
       where i.user_id = new.id
         and i.provider not in ('email', 'phone')
         and i.identity_data -> 'name' = new.raw_user_meta_data -> 'name'
    ) then
      return new;
    end if;
  end if;
  update public.profiles set name = chosen where id = new.id and name is distinct from chosen;
  return new;
end;
$$;

revoke all on function public.handle_renamed_auth_user() from public, anon, authenticated;

create trigger on_auth_user_renamed
  after update of raw_user_meta_data on auth.users
  for each row
  when (old.raw_user_meta_data -> 'name' is distinct from new.raw_user_meta_data -> 'name')
  execute function public.handle_renamed_auth_user();
