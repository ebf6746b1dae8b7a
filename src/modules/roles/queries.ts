import type { AppRole } from '../../lib/roles.ts';
import type { Tx } from '../../plugins/db.ts';

// Queries on user_roles, in the caller's transaction under RLS. A trigger
// records every grant and revocation in role_changes, and another refuses to
// revoke the last admin (supabase/migrations/2026112100061*.sql).

/** Whether a profile with this id is visible to the caller. */
export async function userExists(tx: Tx, userId: string): Promise<boolean> {
  const [row] = await tx<{ found: boolean }[]>`select exists (select 1 from public.profiles where id = ${userId}) as found`;
  return row.found;
}

/**
 * The SQL of "the caller is an admin": the service role, which the legacy admin
 * token uses and which passes row-level security, or a user holding the role.
 * CASE, so that has_role is not called as the service role.
 */
const callerIsAdmin = (tx: Tx) => tx`case when current_user = 'service_role' then true else (select public.has_role('admin')) end`;

/**
 * Whether the caller is an admin now (a user holding the role, or the service
 * role the legacy admin token uses, which bypasses row-level security) and
 * whether the user is there, both in one snapshot: a caller whose admin role
 * was just revoked no longer sees the profile, and is told 403, not that the
 * user is not there. Asked before reading or changing another user's roles.
 */
export async function adminAndUserCheck(tx: Tx, userId: string): Promise<{ callerIsAdmin: boolean; userFound: boolean }> {
  const [row] = await tx<{ caller_is_admin: boolean; user_found: boolean }[]>`
    select ${callerIsAdmin(tx)} as caller_is_admin,
           exists (select 1 from public.profiles where id = ${userId}) as user_found`;
  return { callerIsAdmin: row.caller_is_admin, userFound: row.user_found };
}

export async function getUserRoles(tx: Tx, userId: string): Promise<AppRole[]> {
  const rows = await tx<{ role: AppRole }[]>`select role::text as role from public.user_roles where user_id = ${userId} order by role`;
  return rows.map((row) => row.role);
}

/**
 * Replaces the user's roles with `roles`; returns what was granted and
 * revoked, and the roles the user holds now. `changedBy` is the audit label.
 * Undefined when the caller was no longer an admin by the time its turn came.
 */
export async function replaceUserRoles(
  tx: Tx,
  userId: string,
  roles: AppRole[],
  changedBy: string,
): Promise<{ granted: AppRole[]; revoked: AppRole[]; roles: AppRole[] } | undefined> {
  // Replacements of one user's roles take turns: interleaved, each one's
  // delete and insert would leave a mix of both sets, or deadlock. The role-change
  // trigger records the label (the setting's name is the migration's).
  await tx`select pg_advisory_xact_lock(hashtext('public.user_roles'), hashtext(${userId})), set_config('app.actor', ${changedBy}, true)`;
  // Grants first: an admin who steps down to editor would otherwise have lost
  // the admin row the insert policy asks for before the insert ran (403).
  const granted = await tx<{ role: AppRole }[]>`
    insert into public.user_roles (user_id, role, granted_by)
    select ${userId}, r::public.app_role, (select auth.uid()) from unnest(${roles}::text[]) as r
    on conflict (user_id, role) do nothing
    returning role::text as role`;
  // A caller whose admin role was revoked while it waited for its turn: the
  // insert policy refuses its grants (42501), but the delete policy hides the
  // rows instead, so the delete removes nothing and fails nothing, and a
  // later read of the roles would be hidden as well ([]). So the delete asks
  // whether the caller is an admin, and reads the roles kept, in its own
  // snapshot, the one its policy decides in. (The kept rows are read as the
  // statement began: the delete took none of them.)
  const [change] = await tx<{ caller_is_admin: boolean; revoked: AppRole[]; kept: AppRole[] }[]>`
    with caller as (
      select ${callerIsAdmin(tx)} as is_admin
    ), revoked as (
      delete from public.user_roles
       where user_id = ${userId} and role::text <> all(${roles}::text[]) and (select is_admin from caller)
      returning role::text as role
    )
    select (select is_admin from caller) as caller_is_admin,
           array(select role from revoked) as revoked,
           array(select role::text from public.user_roles where user_id = ${userId} and role::text = any(${roles}::text[]) order by role) as kept`;
  if (!change.caller_is_admin) return undefined;
  return { granted: granted.map((row) => row.role), revoked: change.revoked, roles: change.kept };
}
