-- A profile's name obeys the API's rule (NameSchema; profile_name): trimmed as
-- JavaScript trims, 2 to 100 characters. The table checked only the length of
-- at least 2, and a signed-in user may update their own name through SQL (the
-- Data API, when it is on): 200,000 characters, or a tab and a newline, were
-- stored and then shown by /api/auth/me, /api/users and the admins' list.
--
-- Names already stored that break the rule are mended first, since the check
-- applies to every later update of the row (a sign-in updates last_login):
-- trimmed, cut to 100 characters, else 'user', the name an account without
-- one gets.

update public.profiles
   set name = coalesce(
         public.profile_name(to_jsonb(name)),
         public.profile_name(to_jsonb(left(name, 100))),
         'user'
       )
 where public.profile_name(to_jsonb(name)) is distinct from name;

-- A check runs with the rights of whoever writes the row: the roles that
-- update profiles may run the rule (a pure function of its argument).
grant execute on function public.profile_name(jsonb) to authenticated, service_role;

-- It takes the place of the length check the table was made with.
alter table public.profiles drop constraint profiles_name_check;

alter table public.profiles
  -- `is not distinct from`: the rule answers null for a name it refuses, and a
  -- check that is null passes.
  add constraint profiles_name_obeys_the_rule check (public.profile_name(to_jsonb(name)) is not distinct from name);
