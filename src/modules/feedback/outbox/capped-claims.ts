import { randomUUID } from 'node:crypto';
import type { Config } from '../../../config.ts';
import type { ElevatedSql, Tx } from '../../../plugins/db.ts';
import type { NotifiedFeedback } from './notification.ts';
import { type ClaimedNotification, claimDueNotificationsElevated } from './queries.ts';

// Claims under the cap on notification e-mails (FEEDBACK_NOTIFICATIONS_PER_HOUR,
// docs/feedback.md; migration 20261130004000). A claim under the cap takes an
// advisory lock, counts the e-mails (a notification alone, or a digest) with
// a row claimed in the window (claimed_at), and stamps its own: the
// instances sharing the database share the cap, and two never count the same
// room. While the notifications due fit in the room left, each is claimed on
// its own, as without a cap; when more are due, they are claimed into
// digests (up to `digestMaxItems` each, oldest first), one e-mail each. A
// digest formed once keeps its rows (feedback_outbox.digest_id): a retry, or
// another instance after a lease ran out, claims and sends the same set
// again, under the same idempotency key. Only notifications never tried form
// a digest; one tried alone is retried alone, under its own key.

/**
 * FEEDBACK_NOTIFICATIONS_PER_HOUR unset: a flood reaches the admins as one
 * e-mail every two minutes at most. A provider's daily quota needs less:
 * Resend's free tier (100 a day) fits 4 an hour.
 */
export const DEFAULT_NOTIFICATIONS_PER_HOUR = 30;

/**
 * E-mails an hour, 0 for no cap. Unset under NODE_ENV=test: none, because
 * test apps share one database, and a cap would count every file's notifications.
 */
export function notificationsPerHour(config: Config): number {
  return config.FEEDBACK_NOTIFICATIONS_PER_HOUR ?? (config.NODE_ENV === 'test' ? 0 : DEFAULT_NOTIFICATIONS_PER_HOUR);
}

export interface NotificationCap {
  /** E-mails a window allows, all instances together. */
  perWindow: number;
  windowMs: number;
  digestMaxItems: number;
}

/** One e-mail to send: a notification on its own, or a digest of several. */
export interface ClaimedMail {
  /** The notification's outbox id, or the digest's id: the e-mail the cap counts. */
  mailId: string;
  digest: boolean;
  claims: ClaimedNotification[];
}

const alone = (claim: ClaimedNotification): ClaimedMail => ({ mailId: claim.id, digest: false, claims: [claim] });

const secondsOf = (ms: number) => ms / 1000;

/**
 * Claims up to `limit` e-mails for `leaseMs`. Without a cap, each due
 * notification alone (claimDueNotificationsElevated); with one, only as many
 * e-mails as its window has room for, and digests when more are due.
 */
export async function claimDueMailsElevated(
  sql: ElevatedSql,
  claimToken: string,
  leaseMs: number,
  limit: number,
  cap: NotificationCap | undefined,
): Promise<ClaimedMail[]> {
  if (!cap) return (await claimDueNotificationsElevated(sql, claimToken, leaseMs, limit)).map(alone);
  return sql.begin(async (tx) => {
    // Held to the commit: the count and this claim's stamps are one step for every instance.
    await tx`select pg_advisory_xact_lock(hashtext('public.feedback_outbox: notification cap'))`;
    // An e-mail counts once however many of its rows, and from its last claim: a
    // retry the provider dropped as a repeat (same key) sent nothing new.
    const [{ used }] = await tx<{ used: number }[]>`
      select count(distinct coalesce(digest_id, id))::int as used from public.feedback_outbox
       where claimed_at > now() - make_interval(secs => ${secondsOf(cap.windowMs)})`;
    // The window's room decides alone or digest; a round claims at most `limit` e-mails of it.
    let room = cap.perWindow - used;
    let batch = Math.min(room, limit);
    if (batch <= 0) return [];

    // E-mails tried before (a failed try, a lease that ran out), in the form they were sent in.
    const mails = await claimRetries(tx, claimToken, leaseMs, batch);
    room -= mails.length;
    batch -= mails.length;
    if (batch > 0) {
      const [{ due }] = await tx<{ due: number }[]>`
        select count(*)::int as due from (
          select 1 from public.feedback_outbox
           where digest_id is null and attempts = 0 and last_error is null and sent_at is null and gave_up_at is null and next_attempt_at <= now()
           limit ${room + 1}) d`;
      if (due > room) mails.push(...(await claimIntoDigests(tx, claimToken, leaseMs, batch, cap.digestMaxItems)));
      else if (due > 0) mails.push(...(await claimDueNotificationsElevated(tx, claimToken, leaseMs, batch, { capped: true })).map(alone));
    }
    return mails;
  });
}

/**
 * Up to `batch` e-mails due again, the longest due first: each digest formed
 * earlier with the same rows, and each notification tried alone (attempts
 * above 0, or an error kept from tries before a requeue reset the count; in
 * no digest) alone again. Either way the same idempotency key, so
 * a try that reached the provider before a crash is dropped as a repeat.
 */
async function claimRetries(tx: Tx, claimToken: string, leaseMs: number, batch: number): Promise<ClaimedMail[]> {
  const rows = await tx<{ id: string; digest_id: string | null }[]>`
    with mails as (
      select coalesce(digest_id, id) as mail from public.feedback_outbox
       where sent_at is null and gave_up_at is null and next_attempt_at <= now() and (digest_id is not null or attempts > 0 or last_error is not null)
       group by coalesce(digest_id, id)
       order by min(next_attempt_at), coalesce(digest_id, id)
       limit ${batch}
    )
    select id, digest_id from public.feedback_outbox
     where (digest_id in (select mail from mails) or (digest_id is null and id in (select mail from mails)))
       and sent_at is null and gave_up_at is null and next_attempt_at <= now()
       for update skip locked`;
  return claimRows(tx, claimToken, leaseMs, rows);
}

/**
 * Forms digests of the oldest notifications never tried, at most `batch` of
 * them, and claims them. Only those: one tried alone may have reached the
 * provider under its own key, and in a digest it would go a second time.
 * So a digest's rows are tried together from their first try, and share
 * their count of tries.
 */
async function claimIntoDigests(tx: Tx, claimToken: string, leaseMs: number, batch: number, digestMaxItems: number): Promise<ClaimedMail[]> {
  const due = await tx<{ id: string }[]>`
    select id from public.feedback_outbox
     where digest_id is null and attempts = 0 and last_error is null and sent_at is null and gave_up_at is null and next_attempt_at <= now()
     order by created_at, id
     limit ${batch * digestMaxItems}
       for update skip locked`;
  const rows = due.map(({ id }, index) => ({ id, index }));
  const digestIds = Array.from({ length: Math.ceil(rows.length / digestMaxItems) }, () => randomUUID());
  return claimRows(
    tx,
    claimToken,
    leaseMs,
    rows.map(({ id, index }) => ({ id, digest_id: digestIds[Math.floor(index / digestMaxItems)] })),
  );
}

/**
 * Claims the given rows into their digests (a row of no digest: alone), with
 * the feedback each is about, oldest first in each digest.
 */
async function claimRows(tx: Tx, claimToken: string, leaseMs: number, rows: { id: string; digest_id: string | null }[]): Promise<ClaimedMail[]> {
  if (rows.length === 0) return [];
  const claimed = await tx<{ id: string; feedback_id: string; attempts: number; digest_id: string | null; feedback: NotifiedFeedback | null }[]>`
    with claimed as (
      update public.feedback_outbox o
         set claim_token = ${claimToken},
             attempts = o.attempts + 1,
             next_attempt_at = now() + make_interval(secs => ${secondsOf(leaseMs)}),
             claimed_at = now(),
             digest_id = r.digest_id
        from (select unnest(${rows.map((row) => row.id)}::uuid[]) as id,
                     unnest(${rows.map((row) => row.digest_id)}::uuid[]) as digest_id) r
       where o.id = r.id
      returning o.id, o.feedback_id, o.attempts, o.digest_id, o.created_at
    )
    select c.id, c.feedback_id, c.attempts, c.digest_id,
           case when f.id is null then null else
             jsonb_build_object('id', f.id, 'name', f.name, 'email', f.email, 'rating', f.rating,
                                'comment', f.comment, 'category', f.category, 'location', f.location)
           end as feedback
      from claimed c left join public.feedback f on f.id = c.feedback_id
     order by c.digest_id, c.created_at, c.id`;
  const mails = new Map<string, ClaimedMail>();
  for (const row of claimed) {
    const mailId = row.digest_id ?? row.id;
    const mail = mails.get(mailId) ?? { mailId, digest: row.digest_id !== null, claims: [] };
    mail.claims.push({ id: row.id, feedbackId: row.feedback_id, attempts: row.attempts, claimToken, feedback: row.feedback });
    mails.set(mailId, mail);
  }
  return [...mails.values()];
}

/** A digest's failed try: the rows still owed due again at the same moment, so they are claimed together. */
export async function scheduleDigestRetryElevated(sql: ElevatedSql, claims: ClaimedNotification[], delayMs: number, error: string): Promise<void> {
  await sql`
    update public.feedback_outbox
       set next_attempt_at = now() + make_interval(secs => ${secondsOf(delayMs)}), last_error = ${error}, claim_token = null
     where id = any(${claims.map((claim) => claim.id)}::uuid[]) and claim_token = ${claims[0].claimToken} and sent_at is null`;
}

/**
 * Gives up these rows of a digest. The rest of it, if any, goes on without
 * them: a claim, and so the key, reads only the rows not given up.
 */
export async function giveUpDigestElevated(sql: ElevatedSql, claims: ClaimedNotification[], error: string): Promise<void> {
  await sql`
    update public.feedback_outbox
       set gave_up_at = now(), last_error = ${error}, claim_token = null
     where id = any(${claims.map((claim) => claim.id)}::uuid[]) and claim_token = ${claims[0].claimToken} and sent_at is null`;
}
