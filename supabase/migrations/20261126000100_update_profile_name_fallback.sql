-- A profile's name has at least 2 characters (the table's check). The first
-- version of this trigger took the sign-up name, else the e-mail's local
-- part, however short: an account made outside our API (an identity
-- provider, the auth server's own sign-up, the dashboard) as `a@x.io`, or
-- named ' J ', failed the check, and with it the auth server's insert, so the
-- account could not be created at all. Now the first of the given name, an
-- identity provider's `full_name` and the local part that is long enough,
-- else 'user'.

create or replace function public.handle_new_auth_user()
returns trigger
language plpgsql
security definer
set search_path = ''
as $$
declare
  chosen text;
begin
  select candidate into chosen
    from unnest(array[
           trim(new.raw_user_meta_data ->> 'name'),
           trim(new.raw_user_meta_data ->> 'full_name'),
           split_part(coalesce(new.email, ''), '@', 1)
         ]) with ordinality as c (candidate, position)
   where char_length(candidate) >= 2
   order by position
   limit 1;
  insert into public.profiles (id, email, name, created_at, last_login)
  values (new.id, coalesce(new.email, ''), coalesce(chosen, 'user'), coalesce(new.created_at, now()), new.last_sign_in_at);
  return new;
end;
$$;

revoke all on function public.handle_new_auth_user() from public, anon, authenticated;
