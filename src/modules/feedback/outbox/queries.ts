import type { ElevatedSql, Tx } from '../../../plugins/db.ts';
import type { NotifiedFeedback } from './notification.ts';

// Elevated queries of the notification outbox: they run on the service's own
// connection (`app.db.sql`), because the outbox and the admins' addresses are
// closed to every API role. Only the outbox (worker and backlog) calls them.

export interface ClaimedNotification {
  id: string;
  feedbackId: string;
  /** Tries so far, this one included. */
  attempts: number;
  claimToken: string;
  /** The feedback the e-mail is about; null when it was deleted meanwhile. */
  feedback: NotifiedFeedback | null;
}

/**
 * Claims up to `limit` due notifications for `leaseMs`, with the feedback
 * each is about, in one statement. Half of the batch is the oldest due rows
 * (retries and a backlog drain in order), half the newest (a backlog never
 * holds a new notification back). `for update skip locked` lets concurrent
 * workers pass over rows another is claiming; moving next_attempt_at to the
 * end of the lease keeps them theirs while they send, and a worker that dies
 * mid-send loses its claim when the lease runs out. `capped`: under the
 * hourly cap (capped-claims.ts), which counts the rows' claimed_at and
 * claims a digest's rows together, so only rows in no digest.
 */
export async function claimDueNotificationsElevated(
  sql: ElevatedSql | Tx,
  claimToken: string,
  leaseMs: number,
  limit: number,
  { capped = false } = {},
): Promise<ClaimedNotification[]> {
  const newest = Math.floor(limit / 2);
  const inNoDigest = capped ? sql`and digest_id is null` : sql``;
  // Stamped only under the cap: without one nothing reads it, and the outage drills ran slower with the stamp's index.
  const stampClaim = capped ? sql`, claimed_at = now()` : sql``;
  const rows = await sql<{ id: string; feedback_id: string; attempts: number; feedback: NotifiedFeedback | null }[]>`
    with oldest as (
      select id from public.feedback_outbox
       where sent_at is null and gave_up_at is null and next_attempt_at <= now() ${inNoDigest}
       order by next_attempt_at, id
       limit ${limit - newest}
       for update skip locked
    ), newest as (
      select id from public.feedback_outbox
       where sent_at is null and gave_up_at is null and next_attempt_at <= now() ${inNoDigest}
         and id not in (select id from oldest)
       order by created_at desc, id
       limit ${newest}
       for update skip locked
    ), claimed as (
      update public.feedback_outbox o
         set claim_token = ${claimToken},
             attempts = o.attempts + 1,
             next_attempt_at = now() + make_interval(secs => ${leaseMs / 1000})
             ${stampClaim}
       where o.id in (select id from oldest union all select id from newest)
      returning o.id, o.feedback_id, o.attempts
    )
    select c.id, c.feedback_id, c.attempts,
           case when f.id is null then null else
             jsonb_build_object('id', f.id, 'name', f.name, 'email', f.email, 'rating', f.rating,
                                'comment', f.comment, 'category', f.category, 'location', f.location)
           end as feedback
      from claimed c left join public.feedback f on f.id = c.feedback_id
     order by c.attempts, c.id`;
  return rows.map((row) => ({ id: row.id, feedbackId: row.feedback_id, attempts: row.attempts, claimToken, feedback: row.feedback }));
}

/**
 * Moves the lease of the rows still held under `claimToken` to `leaseMs` from
 * now: a batch that sends slower than its lease keeps its rows, instead of
 * another worker claiming and sending them again while it is still at it.
 */
export async function extendNotificationClaimsElevated(sql: ElevatedSql, claimToken: string, leaseMs: number): Promise<void> {
  await sql`
    update public.feedback_outbox
       set next_attempt_at = now() + make_interval(secs => ${leaseMs / 1000})
     where claim_token = ${claimToken} and sent_at is null and gave_up_at is null`;
}

/** Marks claimed notifications sent in one statement; returns the ids whose claim still held. */
export async function markNotificationsSentElevated(sql: ElevatedSql, sent: { claim: ClaimedNotification; providerMessageId?: string }[]): Promise<Set<string>> {
  if (sent.length === 0) return new Set();
  const rows = await sql<{ id: string }[]>`
    update public.feedback_outbox o
       set sent_at = now(), provider_message_id = s.provider_message_id, last_error = null, claim_token = null
      from (select unnest(${sent.map(({ claim }) => claim.id)}::uuid[]) as id,
                   unnest(${sent.map(({ claim }) => claim.claimToken)}::uuid[]) as claim_token,
                   unnest(${sent.map(({ providerMessageId }) => providerMessageId ?? null)}::text[]) as provider_message_id) s
     where o.id = s.id and o.claim_token = s.claim_token and o.sent_at is null
    returning o.id`;
  return new Set(rows.map((row) => row.id));
}

/**
 * Gives back claims whose send never started: due at once, for this or
 * another instance, and the try the claim counted is taken back, as is its
 * room under the hourly cap (claimed_at, capped-claims.ts).
 */
export async function releaseNotificationClaimsElevated(sql: ElevatedSql, claims: ClaimedNotification[]): Promise<void> {
  if (claims.length === 0) return;
  await sql`
    update public.feedback_outbox o
       set claim_token = null, next_attempt_at = now(), attempts = o.attempts - 1, claimed_at = null
      from (select unnest(${claims.map((claim) => claim.id)}::uuid[]) as id,
                   unnest(${claims.map((claim) => claim.claimToken)}::uuid[]) as claim_token) c
     where o.id = c.id and o.claim_token = c.claim_token and o.sent_at is null`;
}

export async function scheduleNotificationRetryElevated(sql: ElevatedSql, claim: ClaimedNotification, delayMs: number, error: string): Promise<void> {
  await sql`
    update public.feedback_outbox
       set next_attempt_at = now() + make_interval(secs => ${delayMs / 1000}), last_error = ${error}, claim_token = null
     where id = ${claim.id} and claim_token = ${claim.claimToken} and sent_at is null`;
}

/** Stops retrying; the row stays, with its last error, for an operator to see and requeue. */
export async function giveUpNotificationElevated(sql: ElevatedSql, claim: ClaimedNotification, error: string): Promise<void> {
  await sql`
    update public.feedback_outbox
       set gave_up_at = now(), last_error = ${error}, claim_token = null
     where id = ${claim.id} and claim_token = ${claim.claimToken} and sent_at is null`;
}

/**
 * E-mail addresses of every user holding the admin role whose account is
 * neither banned nor deleted (public.admin_notification_emails reads
 * auth.users, which the elevated role cannot): a banned admin gets no feedback.
 */
export async function adminRecipientEmailsElevated(sql: ElevatedSql): Promise<string[]> {
  const rows = await sql<{ email: string }[]>`select email from public.admin_notification_emails() as email`;
  return rows.map((row) => row.email);
}

/**
 * Notifications still owed, and how many of them have failed at least
 * `failingAfter` times; one row. Pending, so admin health can bound it
 * (db.bounded): the health report is read when the pool is busiest.
 */
export function countOwedNotificationsElevated(sql: ElevatedSql, failingAfter: number) {
  return sql<{ owed: number; failing: number }[]>`
    select count(*)::int as owed, count(*) filter (where attempts >= ${failingAfter})::int as failing
      from public.feedback_outbox where sent_at is null and gave_up_at is null`;
}
