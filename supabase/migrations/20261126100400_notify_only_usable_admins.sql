-- Feedback notifications go, when FEEDBACK_NOTIFY_EMAILS is not set, to every
-- admin's e-mail (modules/feedback/outbox). A ban keeps the account and its
-- roles (20261126100000): the API refused the banned admin's tokens, yet every
-- new feedback, with its submitter's name, e-mail and comment, still went to
-- their mailbox. The recipients are now the admins who could open the link
-- the e-mail carries: neither banned nor deleted, by the same rule as
-- session_is_open. When the ban ends, the e-mails come again.
--
-- The API's elevated role cannot read auth.users; this function, owned by the
-- migrations' role, reads it for it and returns the addresses only.
-- Who counts as neither banned nor deleted is public.account_in_use
-- (20261126100000), the rule the session check asks.

create function public.admin_notification_emails()
returns setof text
language sql
stable
security definer
set search_path = ''
as $$
  select distinct p.email
    from public.user_roles r
    join public.profiles p on p.id = r.user_id
    join auth.users u on u.id = r.user_id
   where r.role = 'admin'
     and p.email <> ''
     and public.account_in_use(to_jsonb(u))
   order by p.email;
$$;

comment on function public.admin_notification_emails() is 'E-mail addresses of the admins neither banned nor deleted; the recipients of feedback notifications when FEEDBACK_NOTIFY_EMAILS is not set.';

revoke all on function public.admin_notification_emails() from public, anon, authenticated;
grant execute on function public.admin_notification_emails() to service_role;
