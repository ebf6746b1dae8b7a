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

export async function getUserRoles(tx: Tx, userId: string): Promise<AppRole[]> {
  const rows = await tx<{ role: AppRole }[]>`select role::text as role from public.user_roles where user_id = ${userId} order by role`;
  return rows.map((row) => row.role);
}

/** Replaces the user's roles with `roles`; returns what was granted and revoked. `changedBy` is the audit label. */
export async function replaceUserRoles(
  tx: Tx,
  userId: string,
  roles: AppRole[],
  changedBy: string,
): Promise<{ granted: AppRole[]; revoked: AppRole[] }> {
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
  const revoked = await tx<{ role: AppRole }[]>`
    delete from public.user_roles
     where user_id = ${userId} and role::text <> all(${roles}::text[])
    returning role::text as role`;
  return { granted: granted.map((row) => row.role), revoked: revoked.map((row) => row.role) };
}
