import type { Sql } from '../../plugins/db.ts';
import type { NotifiedFeedback } from './notification.ts';

// Elevated queries of the notification worker: they run on the service's own
// connection (`app.db.sql`), because the outbox and the admins' addresses are
// closed to every API role. Only the worker calls them.

export interface ClaimedNotification {
  id: string;
  feedbackId: string;
  /** Tries so far, this one included. */
  attempts: number;
  claimToken: string;
}

/**
 * Claims the oldest due notification for `leaseMs`: `for update skip locked`
 * lets concurrent workers pass over a row another is claiming, and moving
 * next_attempt_at to the end of the lease keeps it theirs while they send.
 * A worker that dies mid-send loses the claim when the lease runs out.
 */
export async function claimDueNotification(sql: Sql, claimToken: string, leaseMs: number): Promise<ClaimedNotification | undefined> {
  const [row] = await sql<{ id: string; feedback_id: string; attempts: number }[]>`
    update public.feedback_outbox
       set claim_token = ${claimToken},
           attempts = attempts + 1,
           next_attempt_at = now() + make_interval(secs => ${leaseMs / 1000})
     where id = (
       select id from public.feedback_outbox
        where sent_at is null and gave_up_at is null and next_attempt_at <= now()
        order by next_attempt_at, id
        limit 1
        for update skip locked)
    returning id, feedback_id, attempts`;
  return row && { id: row.id, feedbackId: row.feedback_id, attempts: row.attempts, claimToken };
}

/** Marks a claimed notification sent; false when the claim was lost (lease ran out and another took it). */
export async function markNotificationSent(sql: Sql, claim: ClaimedNotification, providerMessageId: string | undefined): Promise<boolean> {
  const rows = await sql`
    update public.feedback_outbox
       set sent_at = now(), provider_message_id = ${providerMessageId ?? null}, last_error = null, claim_token = null
     where id = ${claim.id} and claim_token = ${claim.claimToken} and sent_at is null
    returning id`;
  return rows.length === 1;
}

export async function scheduleNotificationRetry(sql: Sql, claim: ClaimedNotification, delayMs: number, error: string): Promise<void> {
  await sql`
    update public.feedback_outbox
       set next_attempt_at = now() + make_interval(secs => ${delayMs / 1000}), last_error = ${error}, claim_token = null
     where id = ${claim.id} and claim_token = ${claim.claimToken} and sent_at is null`;
}

/** Stops retrying; the row stays, with its last error, for an operator to see and requeue. */
export async function giveUpNotification(sql: Sql, claim: ClaimedNotification, error: string): Promise<void> {
  await sql`
    update public.feedback_outbox
       set gave_up_at = now(), last_error = ${error}, claim_token = null
     where id = ${claim.id} and claim_token = ${claim.claimToken} and sent_at is null`;
}

export async function feedbackForNotification(sql: Sql, feedbackId: string): Promise<NotifiedFeedback | undefined> {
  const [row] = await sql<NotifiedFeedback[]>`
    select id, name, email, rating, comment, category, location
      from public.feedback where id = ${feedbackId}`;
  return row;
}

/** E-mail addresses of every user holding the admin role. */
export async function adminRecipientEmails(sql: Sql): Promise<string[]> {
  const rows = await sql<{ email: string }[]>`
    select distinct p.email
      from public.user_roles r
      join public.profiles p on p.id = r.user_id
     where r.role = 'admin' and p.email <> ''
     order by p.email`;
  return rows.map((row) => row.email);
}
