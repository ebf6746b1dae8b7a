import { createHash, randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import { AppError, conflict } from '../../lib/errors.ts';
import type { Database } from '../../plugins/db.ts';
import { claimIdempotencyKeyElevated, deleteIdempotencyKeysBeforeElevated, idempotencyKeyElevated, releaseIdempotencyClaimElevated } from './queries.ts';

// Idempotency-Key on feedback submissions, after the IETF draft "The
// Idempotency-Key HTTP Header Field" (draft-ietf-httpapi-idempotency-key-header).
// A client whose answer was lost sends the same request with the same key;
// it gets the first answer again instead of storing a second row (and a
// second e-mail to the admins). The keys live in PostgreSQL, so every
// instance sees every claim (20261130020000_remember_feedback_idempotency_keys.sql):
// claimed before the bot check, answered by the insert's own transaction,
// given back when the attempt fails, kept 24 hours.

/** How long a key's answer is given again; the periodic delete removes it after. */
export const IDEMPOTENCY_KEY_KEPT_S = 24 * 60 * 60;
/**
 * How long an unanswered claim counts as in progress. An attempt takes at
 * most some 15 s (the bot check's 5 s, a connection's 5 s, the insert's 5 s
 * statement timeout); a claim still unanswered well past that was left by a
 * server that died mid-way, and a retry may take it over. Should the first
 * attempt still insert after that, its trigger finds the claim gone and its
 * insert is refused: one key never answers for two rows.
 */
export const IDEMPOTENCY_CLAIM_ABANDONED_AFTER_S = 60;

export const IDEMPOTENCY_KEY_REUSED = 'Idempotency-Key reused with a different request';
export const IDEMPOTENCY_KEY_IN_PROGRESS = 'A request with this Idempotency-Key is in progress';

/** The key as scoped to its client: SHA-256 of the rate-limit subject and the key, so neither is stored. */
export function scopedIdempotencyKey(clientNetwork: string, key: string): Buffer {
  return createHash('sha256').update(clientNetwork).update('\0').update(key).digest();
}

/**
 * SHA-256 of the request as parsed, its fields in a fixed order, without
 * `omit` (the bot check's token: a retry sends the same one, which the
 * provider refuses the second time, and it says nothing about what is submitted).
 */
export function requestFingerprint(body: Record<string, unknown>, omit: readonly string[]): Buffer {
  const fields = Object.keys(body)
    .filter((name) => !omit.includes(name) && body[name] !== undefined)
    .sort();
  return createHash('sha256')
    .update(JSON.stringify(fields.map((name) => [name, body[name]])))
    .digest();
}

/** A claim this attempt holds: the insert names it, so its trigger records the answer on it. */
export interface IdempotencyClaim {
  scopedKey: Buffer;
  claimId: string;
}

export type IdempotencyOutcome<T> = { kind: 'claimed'; claim: IdempotencyClaim } | { kind: 'replay'; status: number; data: T };

/**
 * Claims `scopedKey` for this attempt, or says what is remembered: the first
 * answer (same request), 422 (another request under the key), 409 (the first
 * attempt has not answered yet). A few rounds, as a claim given back or a key
 * deleted between the two statements leaves nothing to read.
 */
export async function claimOrReplay<T>(db: Database, scopedKey: Buffer, requestHash: Buffer): Promise<IdempotencyOutcome<T>> {
  for (let round = 0; round < 3; round += 1) {
    const claimId = randomUUID();
    const claimed = await db.bounded(
      claimIdempotencyKeyElevated(db.sql, {
        scopedKey,
        requestHash,
        claimId,
        abandonedAfterS: IDEMPOTENCY_CLAIM_ABANDONED_AFTER_S,
        keptForS: IDEMPOTENCY_KEY_KEPT_S,
      }),
    );
    if (claimed.length === 1) return { kind: 'claimed', claim: { scopedKey, claimId } };
    const [held] = await db.bounded(idempotencyKeyElevated(db.sql, scopedKey));
    if (!held) continue;
    if (!held.request_hash.equals(requestHash)) throw new AppError(422, IDEMPOTENCY_KEY_REUSED);
    if (held.answer_status === null || held.answer_data === null) throw conflict(IDEMPOTENCY_KEY_IN_PROGRESS);
    return { kind: 'replay', status: held.answer_status, data: held.answer_data as T };
  }
  throw conflict(IDEMPOTENCY_KEY_IN_PROGRESS);
}

/**
 * Gives back the claim of an attempt that failed (a refused bot check, an
 * unknown website, an outage), so a retry is processed anew, as the draft
 * asks of an error. Not given back, it would answer 409 until abandoned.
 */
export async function releaseClaim(db: Database, claim: IdempotencyClaim, log?: FastifyBaseLogger): Promise<void> {
  try {
    await db.bounded(releaseIdempotencyClaimElevated(db.sql, claim));
  } catch (error) {
    log?.warn({ err: error }, 'giving back an Idempotency-Key claim failed; a retry gets 409 until it is abandoned');
  }
}

/** The insert's trigger refused it: the claim was taken over (see IDEMPOTENCY_CLAIM_ABANDONED_AFTER_S). */
export const isClaimLost = (error: unknown): boolean => (error as { hint?: unknown } | null)?.hint === 'feedback_idempotency_claim_lost';

/** Keys deleted per statement of the periodic delete. */
export const DELETE_BATCH_SIZE = 5_000;

/**
 * Deletes the keys older than IDEMPOTENCY_KEY_KEPT_S, batch by batch, each a
 * short statement of its own; returns how many went. A key past its time is
 * never replayed even before this runs (the claim takes it over): this only
 * keeps the table small.
 */
export async function deleteExpiredIdempotencyKeys(
  db: Database,
  { batchSize = DELETE_BATCH_SIZE, stopped = () => false }: { batchSize?: number; stopped?: () => boolean } = {},
): Promise<number> {
  const cutoff = new Date(Date.now() - IDEMPOTENCY_KEY_KEPT_S * 1000);
  let total = 0;
  while (!stopped()) {
    const deleted = await deleteIdempotencyKeysBeforeElevated(db.sql, cutoff, batchSize);
    total += deleted;
    if (deleted < batchSize) break;
  }
  return total;
}
