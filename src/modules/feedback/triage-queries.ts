import type { Tx } from '../../plugins/db.ts';
import type { FeedbackStatus } from './queries.ts';

// The admin's writes to feedback: triage of one item, and its deletion, in
// the caller's transaction under row-level security (writeAtOnceAsActor).

export interface TriageChange {
  status?: FeedbackStatus;
  /** null clears the notes. */
  adminNotes?: string | null;
  resolvedBy?: string;
  /** Who resolves when the change resolves without naming anyone. */
  resolvedByDefault: string;
}

export interface TriageResult {
  /** Whether the caller was an admin (or the service role) when the change was made; when not, nothing changed. */
  callerIsAdmin: boolean;
  /** Undefined when nothing changed: the caller was no admin, or no row with that id is visible. */
  updated?: { id: string; status: FeedbackStatus; resolvedAt: string | null };
}

/**
 * The SQL of "the caller is an admin": the service role, which the legacy
 * admin token uses and which passes row-level security, or a user holding the
 * role. CASE, so that has_role is not called as the service role, which may
 * not execute it.
 */
const callerIsAdmin = (tx: Tx) => tx`case when current_user = 'service_role' then true else (select public.has_role('admin')) end`;

/**
 * Applies an admin's triage change. Resolving sets resolved_at (kept when
 * already resolved) and resolved_by (given, else kept, else
 * `resolvedByDefault`); back to pending clears both; archiving keeps them.
 *
 * Two statements, both sent at once. The first takes the row's lock. The
 * update policy's role check is a subquery, read in its statement's snapshot:
 * an update that waited for the lock while the caller's admin role was
 * revoked was re-checked on the row alone (READ COMMITTED re-evaluates the
 * WHERE on the row's newest version, not the subquery), and stored its
 * change. So the update is a statement of its own, begun once the lock is
 * held, and its snapshot sees any revocation committed before; it asks
 * whether the caller is an admin in that snapshot, the one its policy decides
 * in, and changes nothing when not. The lock is the one the update takes
 * itself (no key column changes), so it waits for nothing more.
 */
export async function updateFeedbackTriage(tx: Tx, id: string, change: TriageChange): Promise<TriageResult> {
  const status = change.status ?? null;
  const resolvedBy = change.resolvedBy ?? null;
  const [, [row]] = await Promise.all([
    tx`select from public.feedback where id = ${id} for no key update`,
    tx<{ caller_is_admin: boolean; id: string | null; status: FeedbackStatus | null; resolved_at: Date | null }[]>`
      with caller as (
        select ${callerIsAdmin(tx)} as is_admin
      ), updated as (
        update public.feedback set
          status = coalesce(${status}::public.feedback_status, status),
          admin_notes = case when ${change.adminNotes !== undefined} then ${change.adminNotes ?? null} else admin_notes end,
          resolved_at = case ${status}::public.feedback_status
            when 'resolved' then case when status = 'resolved' then resolved_at else now() end
            when 'pending' then null
            else resolved_at end,
          resolved_by = case ${status}::public.feedback_status
            when 'resolved' then coalesce(${resolvedBy}, case when status = 'resolved' then resolved_by end, ${change.resolvedByDefault})
            when 'pending' then null
            else coalesce(${resolvedBy}, resolved_by) end
         where id = ${id} and (select is_admin from caller)
        returning id, status, resolved_at
      )
      select caller.is_admin as caller_is_admin, updated.id, updated.status, updated.resolved_at
        from caller left join updated on true`,
  ]);
  if (!row.caller_is_admin || row.id === null || row.status === null) return { callerIsAdmin: row.caller_is_admin };
  return { callerIsAdmin: true, updated: { id: row.id, status: row.status, resolvedAt: row.resolved_at?.toISOString() ?? null } };
}

export interface DeletionResult {
  /** Whether the caller was an admin (or the service role) when the delete ran; when not, nothing was deleted. */
  callerIsAdmin: boolean;
  /** Whether a row with that id was visible and is gone. */
  deleted: boolean;
}

/**
 * Deletes one feedback item; its notification row goes by the outbox's
 * cascade. Two statements sent at once, for the reason updateFeedbackTriage
 * gives: the delete policy's role check is read in its statement's snapshot,
 * and a delete that waited for the row's lock (a triage under way) while the
 * caller's role was revoked would be re-checked on the row alone. Taking the
 * lock first, the delete begins once it is held and asks for the role in a
 * snapshot that sees any revocation committed before.
 */
export async function deleteFeedbackRow(tx: Tx, id: string): Promise<DeletionResult> {
  const [, [row]] = await Promise.all([
    tx`select from public.feedback where id = ${id} for update`,
    tx<{ caller_is_admin: boolean; deleted: boolean }[]>`
      with caller as (
        select ${callerIsAdmin(tx)} as is_admin
      ), deleted as (
        delete from public.feedback where id = ${id} and (select is_admin from caller)
        returning id
      )
      select caller.is_admin as caller_is_admin, exists (select from deleted) as deleted from caller`,
  ]);
  return { callerIsAdmin: row.caller_is_admin, deleted: row.deleted };
}
