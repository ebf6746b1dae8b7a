-- Accounts made before these migrations ran (a hosted project that already
-- had users, made in its dashboard or by another app) never had a profile:
-- the insert trigger sees new accounts only, and the update triggers only
-- change a profile that exists. Without one, /api/auth/me answered 404,
-- a reset e-mail "No user found with this email", `npm run grant-role`
-- could not find the first admin, and such an admin got no notifications.
-- Each gets the profile a new account gets (handle_new_auth_user's rule).
-- A soft-deleted account (deleted_at, a column of the auth server's later
-- tables) gets none, as 20261126100200 removes theirs.

insert into public.profiles (id, email, name, created_at, last_login)
select u.id,
       coalesce(u.email, ''),
       coalesce(
         public.profile_name(u.raw_user_meta_data -> 'name'),
         public.profile_name(u.raw_user_meta_data -> 'full_name'),
         public.profile_name(to_jsonb(split_part(coalesce(u.email, ''), '@', 1))),
         'user'
       ),
       coalesce(u.created_at, now()),
       u.last_sign_in_at
  from auth.users u
 where to_jsonb(u) ->> 'deleted_at' is null
on conflict (id) do nothing;
