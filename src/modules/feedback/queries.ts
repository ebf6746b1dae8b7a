import { isoTimestamp } from '../../lib/timestamps.ts';
import { type ElevatedSql, fixedStatement, type Tx } from '../../plugins/db.ts';
import type { Feedback } from './schemas.ts';
import { servedScreenshotType } from './screenshot.ts';

// One query per function, named after what it returns. Every function takes the
// caller's transaction (`asActor` or `readAtOnceAsActor`), so row-level
// security decides. The submission is here; the admin's write, triage, is in
// triage-queries.ts.

export type FeedbackStatus = Feedback['status'];

export interface NewFeedbackRow {
  id: string;
  name: string;
  email: string;
  comment: string;
  rating: number;
  location: string | null;
  category: string | null;
  screenshot: string | null;
  websiteId: string | null;
}

export interface FeedbackFilter {
  status?: FeedbackStatus;
  websiteId?: string;
  /** The sender's address, HTML-escaped as the stored one is; compared in any case. */
  email?: string;
}

/** By creation time, id breaking ties so pages never overlap; each direction is a statement (and plan) of its own. */
const BY_CREATION = { asc: 'order by created_at asc, id asc', desc: 'order by created_at desc, id desc' } as const;

/** A row as the list (and the one-item read) reads it: timestamps as PostgreSQL's text (see isoTimestamp), under names of their own. */
interface FeedbackRow {
  id: string;
  name: string;
  email: string;
  comment: string;
  rating: number;
  status: FeedbackStatus;
  location: string | null;
  category: string | null;
  screenshot_type: string | null;
  screenshot_bytes: number | null;
  admin_notes: string | null;
  resolved_by: string | null;
  resolved_at_text: string | null;
  website_id: string | null;
  created_at_text: string;
  updated_at_text: string;
}

function toFeedback(row: FeedbackRow): Feedback {
  return {
    id: row.id,
    name: row.name,
    email: row.email,
    comment: row.comment,
    rating: row.rating,
    status: row.status,
    location: row.location,
    category: row.category,
    // A reference, never the data: one page of the list stays small (docs/feedback.md).
    screenshot: row.screenshot_bytes === null ? null : `/api/feedback/${row.id}/screenshot`,
    screenshotType: row.screenshot_bytes === null ? null : servedScreenshotType(row.screenshot_type),
    screenshotSize: row.screenshot_bytes,
    adminNotes: row.admin_notes,
    resolvedBy: row.resolved_by,
    resolvedAt: row.resolved_at_text === null ? null : isoTimestamp(row.resolved_at_text),
    websiteId: row.website_id,
    createdAt: isoTimestamp(row.created_at_text),
    updatedAt: isoTimestamp(row.updated_at_text),
  };
}

/**
 * Inserts submitted feedback; the outbox row is added by a trigger in the same
 * transaction. No `returning`: submitters may insert but not read, and
 * RETURNING needs SELECT under row-level security, so the id comes from the caller.
 */
export async function insertFeedback(tx: Tx, row: NewFeedbackRow): Promise<void> {
  await tx`
    insert into public.feedback (id, name, email, comment, rating, location, category, screenshot, website_id)
    values (${row.id}, ${row.name}, ${row.email}, ${row.comment}, ${row.rating},
            ${row.location}, ${row.category}, ${row.screenshot}, ${row.websiteId})`;
}

/**
 * Names the Idempotency-Key claim the transaction's feedback insert answers:
 * its trigger records the answer on that claim in the same transaction
 * (20261130020000_remember_feedback_idempotency_keys.sql). Transaction-local
 * settings, gone at its end; issued before the insert.
 */
export function nameIdempotencyClaim(tx: Tx, claim: { scopedKey: Buffer; claimId: string }) {
  return fixedStatement(
    tx,
    `select set_config('feedback_idempotency.scoped_key', $1, true), set_config('feedback_idempotency.claim_id', $2, true)`,
    [claim.scopedKey.toString('hex'), claim.claimId],
  );
}

/** A remembered Idempotency-Key as the submission reads it. */
export interface IdempotencyKeyRow {
  request_hash: Buffer;
  claim_id: string;
  answer_status: number | null;
  answer_data: { id: string; status: 'pending' } | null;
}

/**
 * Elevated (the submitter has no rights on the keys): claims the key for
 * `claimId`, when no one holds it, or when what holds it is over: a claim
 * left unanswered past `abandonedAfterS` (its server died, or gave it back
 * too late), or a key past `keptForS`, not yet deleted. A row comes back
 * when this attempt holds it now.
 */
export function claimIdempotencyKeyElevated(
  sql: ElevatedSql,
  claim: { scopedKey: Buffer; requestHash: Buffer; claimId: string; abandonedAfterS: number; keptForS: number },
) {
  return sql<{ claimed: boolean }[]>`
    insert into public.feedback_idempotency_keys as k (scoped_key, request_hash, claim_id)
    values (${claim.scopedKey}, ${claim.requestHash}, ${claim.claimId})
    on conflict (scoped_key) do update
       set request_hash = excluded.request_hash, claim_id = excluded.claim_id, claimed_at = now(),
           answer_status = null, answer_data = null, feedback_id = null
     where k.claimed_at < now() - make_interval(secs => ${claim.keptForS})
        or (k.answer_status is null and k.claimed_at < now() - make_interval(secs => ${claim.abandonedAfterS}))
    returning true as claimed`;
}

/** Elevated: the key as remembered now; no row when it is not (given back or deleted since). */
export function idempotencyKeyElevated(sql: ElevatedSql, scopedKey: Buffer) {
  return sql<IdempotencyKeyRow[]>`
    select request_hash, claim_id, answer_status, answer_data
      from public.feedback_idempotency_keys where scoped_key = ${scopedKey}`;
}

/** Elevated: gives back a claim that got no answer (its attempt failed), so a retry may try again. */
export function releaseIdempotencyClaimElevated(sql: ElevatedSql, claim: { scopedKey: Buffer; claimId: string }) {
  return sql`
    delete from public.feedback_idempotency_keys
     where scoped_key = ${claim.scopedKey} and claim_id = ${claim.claimId} and answer_status is null`;
}

/**
 * Elevated: deletes at most `batchSize` of the keys claimed before `cutoff`,
 * oldest first, as one short statement; returns how many went.
 */
export async function deleteIdempotencyKeysBeforeElevated(sql: ElevatedSql, cutoff: Date, batchSize: number): Promise<number> {
  const result = await sql`
    delete from public.feedback_idempotency_keys
     where scoped_key = any (array(
       select scoped_key from public.feedback_idempotency_keys
        where claimed_at < ${cutoff}::timestamptz
        order by claimed_at
        limit ${batchSize}))`;
  return result.count;
}

/**
 * The filter as SQL naming only the conditions given, so each combination is a
 * prepared statement of its own that Postgres plans for what it asks. With one
 * statement for all (`$1 is null or status = $1`), the plan Postgres settles
 * on after five runs scanned and sorted the whole table (docs/performance.md).
 * The text is made of constants alone (fixedStatement): the values are
 * parameters, numbered from $1 in the order of `values`.
 */
function filterSql(filter: FeedbackFilter): { where: string; values: string[] } {
  const values: string[] = [];
  let where = 'where true';
  if (filter.status !== undefined) {
    values.push(filter.status);
    where += ` and status = $${values.length}::public.feedback_status`;
  }
  if (filter.websiteId !== undefined) {
    values.push(filter.websiteId);
    where += ` and website_id = $${values.length}::uuid`;
  }
  if (filter.email !== undefined) {
    // The stored column's own folding, so both sides are lowered alike
    // (20261129210201_find_feedback_by_sender_email.sql). The value comes in
    // NFC, as addresses are stored since 2026-11-30; the NFD spelling finds a
    // row stored decomposed before then. Both are index conditions.
    values.push(filter.email);
    where += ` and email_lowercase in (lower($${values.length}), lower(normalize($${values.length}, NFD)))`;
  }
  return { where, values };
}

/**
 * How many rows match, summed from the counts and the changes not yet folded
 * into them (both kept by triggers in the transaction of every change) rather
 * than counted: a handful of rows however large the table grows. Row-level
 * security gives them the same readers as the feedback itself. Filtered by
 * sender, the rows themselves are counted.
 */
export async function countFeedback(tx: Tx, filter: FeedbackFilter): Promise<number> {
  const { where, values } = filterSql(filter);
  if (filter.email !== undefined) {
    // The counts are kept per status and website, not per sender; one
    // sender's rows are few, counted from the address's index.
    const [counted] = await fixedStatement<{ total: number }[]>(tx, `select count(*)::int as total from public.feedback ${where}`, values);
    return counted.total;
  }
  const [row] = await fixedStatement<{ total: number }[]>(
    tx,
    `select coalesce(sum(how_many), 0)::int as total
       from (select total as how_many from public.feedback_counts ${where}
             union all
             select delta from public.feedback_count_changes ${where}) as counted`,
    values,
  );
  return row.total;
}

/**
 * The columns of a FeedbackRow. The timestamps' text has names of its own: as
 * `created_at`, the list's ORDER BY would sort by the text column, not the
 * indexed timestamp.
 */
const FEEDBACK_COLUMNS = `
  id, name, email, comment, rating, status, location, category, screenshot_type, screenshot_bytes,
  admin_notes, resolved_by, resolved_at::text as resolved_at_text, website_id,
  created_at::text as created_at_text, updated_at::text as updated_at_text`;

/**
 * A page of feedback in the order asked for.
 *
 * Past the first page, or filtered by status, the page's ids are found first
 * and only its rows read: under row-level security PostgreSQL checks
 * `status = …` (its enum comparison is not leakproof) on each row after the
 * policy, never in an index condition, so a page 10,000 rows deep, or of a
 * status the newest rows lack, read every row it skipped from the table: 0.2
 * to 2 s on a million rows. The ids come from the creation indexes alone
 * (they carry status and website, 20261129130000), and the rows are the
 * page's 20, looked up by id. Not a join with the page: on the generic plan
 * the unfiltered pages run on (service.ts), PostgreSQL takes a page of
 * unknown size for a tenth of the table and hashed the whole table to join
 * it; an id list is looked up in the primary key on any plan. The unfiltered
 * first page, the one read most, reads its 20 rows straight: the lookup would
 * cost it a fifth more of PostgreSQL's time.
 */
export async function listFeedback(tx: Tx, filter: FeedbackFilter, page: { order: 'asc' | 'desc'; limit: number; offset: number }): Promise<Feedback[]> {
  const { where, values } = filterSql(filter);
  const pageOfRows = `${where} ${BY_CREATION[page.order]} limit $${values.length + 1} offset $${values.length + 2}`;
  const text =
    page.offset === 0 && filter.status === undefined
      ? `select ${FEEDBACK_COLUMNS} from public.feedback ${pageOfRows}`
      : `select ${FEEDBACK_COLUMNS}
           from public.feedback
          where id = any (array(select id from public.feedback ${pageOfRows}))
          ${BY_CREATION[page.order]}`;
  const rows = await fixedStatement<FeedbackRow[]>(tx, text, [...values, page.limit, page.offset]);
  return rows.map(toFeedback);
}

/** One feedback item as the list shows it; undefined when no row with that id is visible. */
export async function feedbackById(tx: Tx, id: string): Promise<Feedback | undefined> {
  const [row] = await fixedStatement<FeedbackRow[]>(tx, `select ${FEEDBACK_COLUMNS} from public.feedback where id = $1`, [id]);
  return row && toFeedback(row);
}

/** One feedback item's screenshot data URL; undefined when the row is not visible, null when it has none. */
export async function feedbackScreenshot(tx: Tx, id: string): Promise<string | null | undefined> {
  const [row] = await tx<{ screenshot: string | null }[]>`select screenshot from public.feedback where id = ${id}`;
  return row?.screenshot;
}

/**
 * A row as the export reads it: no screenshot, timestamps as Dates (lib/csv.ts
 * writes them), and created_at once more as PostgreSQL's text, the row's place
 * for the next chunk: a Date keeps milliseconds, PostgreSQL microseconds.
 */
type ExportRow = Omit<FeedbackRow, 'screenshot_type' | 'screenshot_bytes' | 'resolved_at_text' | 'updated_at_text'> & {
  resolved_at: Date | null;
  created_at: Date;
  updated_at: Date;
};

/**
 * Whether row-level security lets the caller read feedback now: an admin, or
 * the service role (the legacy admin token), which bypasses it. CASE, so that
 * has_role is not called as the service role, which may not execute it.
 */
export async function callerMayReadFeedback(tx: Tx): Promise<boolean> {
  const [row] = await fixedStatement<{ allowed: boolean }[]>(
    tx,
    `select case when current_user = 'service_role' then true else (select public.has_role('admin')) end as allowed`,
    [],
  );
  return row.allowed;
}

/** Where the export stands: its last row's created_at as PostgreSQL's text, and its id. */
export interface ExportPosition {
  createdAt: string;
  id: string;
}

/**
 * Past the position in the order read: a row comparison on the columns of the
 * list's indexes, so the index scan starts there. The timestamp is sent as
 * text: a parameter PostgreSQL describes as timestamptz is sent by the driver
 * through a Date from its second run on, microseconds lost.
 */
const AFTER_POSITION = { asc: '(created_at, id) > ', desc: '(created_at, id) < ' } as const;

/** The text of an exported row, in bytes as stored; the export's chunks are bounded by it. */
const EXPORT_TEXT_BYTES = `octet_length(name) + octet_length(email) + octet_length(comment)
  + coalesce(octet_length(location), 0) + coalesce(octet_length(category), 0)
  + coalesce(octet_length(admin_notes), 0) + coalesce(octet_length(resolved_by), 0)`;

const EXPORT_COLUMNS = `id, name, email, comment, rating, status, location, category,
  admin_notes, resolved_by, resolved_at, website_id, created_at, updated_at`;

/**
 * The next matching rows after `after` (from the first when it is undefined),
 * in the list's order; the screenshot is left out. The export reads in these
 * chunks, each a short statement of its own (service.ts), and holds a chunk
 * in memory while its client takes it. So a chunk is at most `limit` rows, and
 * of those only as many as begin within `maxTextBytes` of text (always the
 * first): 500 rows of ordinary feedback are some 150 kB, 500 of the longest
 * text the table allows tens of MB. `nothingAfter` when the statement found
 * fewer than `limit` rows and the chunk holds them all.
 */
export async function feedbackExportChunk(
  tx: Tx,
  filter: FeedbackFilter,
  chunk: { order: 'asc' | 'desc'; after: ExportPosition | undefined; limit: number; maxTextBytes: number },
): Promise<{ rows: ExportRow[]; nothingAfter: boolean }> {
  const { where, values } = filterSql(filter);
  const params: Array<string | number> = [...values];
  let position = '';
  if (chunk.after) {
    params.push(chunk.after.createdAt, chunk.after.id);
    position = ` and ${AFTER_POSITION[chunk.order]}($${params.length - 1}::text::timestamptz, $${params.length}::uuid)`;
  }
  // At least one row a chunk, whatever the bound: an empty chunk reads as the end.
  params.push(chunk.limit, Math.max(1, chunk.maxTextBytes));
  const order = BY_CREATION[chunk.order];
  const rows = await fixedStatement<Array<ExportRow & { found: number }>>(
    tx,
    `select ${EXPORT_COLUMNS}, created_at_text, found
       from (select ${EXPORT_COLUMNS}, created_at::text as created_at_text,
                    count(*) over () :: int as found,
                    sum(text_bytes) over (${order} rows between unbounded preceding and current row) - text_bytes as bytes_before
               from (select ${EXPORT_COLUMNS}, ${EXPORT_TEXT_BYTES} as text_bytes
                       from public.feedback
                       ${where}${position}
                      ${order}
                      limit $${params.length - 1}) found_rows) measured
      where bytes_before < $${params.length}
      ${order}`,
    params,
  );
  return { rows, nothingAfter: rows.length === 0 || (rows[0].found < chunk.limit && rows.length === rows[0].found) };
}
