import { setTimeout } from 'node:timers/promises';
import type { FastifyBaseLogger } from 'fastify';
import { generateApiKey, hashApiKey, isWellFormedApiKey } from '../../lib/api-keys.ts';
import { retryDelayMs } from '../../lib/backoff.ts';
import { errorCode, notFound } from '../../lib/errors.ts';
import type { PaginationQuery } from '../../lib/schemas.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database } from '../../plugins/db.ts';
import {
  beginWebsiteDeletion,
  deleteWebsiteBatchElevated,
  getWebsite,
  getWebsiteCount,
  getWebsitePage,
  insertWebsite,
  replaceApiKey,
  selectWebsiteByApiKeyHashElevated,
  selectWebsiteIdsBeingDeletedElevated,
  toWebsite,
  updateWebsite,
} from './queries.ts';
import { createRunningDeletions, type DeletionOutcome } from './deletion/running.ts';
import type { CreateWebsiteBody, UpdateWebsiteBody, Website } from './schemas.ts';

// Websites and their API keys. Every operation runs as its caller under
// row-level security, except the lookup by key, where the key is the credential.

export const websiteNotFound = () => notFound('Website not found');

// A deletion batch the statement timeout cut (a lock held by ingestion, a busy
// moment) or a deadlock picked: tried again at half the size, a few times in a
// row before the caller gets 503 and the deletion is left to be asked again.
// Each retry waits a little longer first (about 25, 50, 100 ms), so retries
// straight after one another do not all land in the same busy moment.
// ACQUIRE_TIMEOUT is the pool's deadline (db.bounded): no connection, or no
// answer, in time. It starts before the statement does and is as long as the
// statement timeout by default, so a batch held by a lock meets it first.
const BATCH_RETRY_CODES = new Set(['57014', '55P03', '40P01', '40001', 'ACQUIRE_TIMEOUT']);
const BATCH_RETRIES = 3;
const BATCH_RETRY_BACKOFF = { baseMs: 25, maxMs: 1_000 };
const isBatchRetryable = (error: unknown) => BATCH_RETRY_CODES.has(String(errorCode(error)));

export interface WebsitesServiceDeps {
  db: Database;
  /** Rows per deletion batch (WEBSITE_DELETE_BATCH). */
  deleteBatchSize: number;
  /** Where deletions that no caller waited for say how they ended (deletion/running.ts). */
  log: FastifyBaseLogger;
}

export function createWebsitesService({ db, deleteBatchSize, log }: WebsitesServiceDeps) {
  /** The new website with its API key, shown in full only here. */
  async function createWebsite(caller: Caller, body: CreateWebsiteBody): Promise<Website & { apiKey: string }> {
    const apiKey = generateApiKey();
    const website = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) =>
      insertWebsite(tx, {
        name: body.name,
        domain: body.domain,
        settings: body.settings ?? {},
        metadata: body.metadata ?? {},
        apiKeyHash: apiKey.hash,
        apiKeyPrefix: apiKey.prefix,
      }),
    );
    return { ...website, apiKey: apiKey.key };
  }

  async function listWebsites(caller: Caller, page: PaginationQuery): Promise<{ data: Website[]; total: number }> {
    return db.readAtOnceAsActor(dbActorOf(caller), async (tx) => {
      const [data, total] = await Promise.all([getWebsitePage(tx, page), getWebsiteCount(tx)]);
      return { data, total };
    });
  }

  async function findWebsite(caller: Caller, id: string): Promise<Website> {
    const website = await db.readAtOnceAsActor(dbActorOf(caller), (tx) => getWebsite(tx, id));
    if (!website) throw websiteNotFound();
    return website;
  }

  async function changeWebsite(caller: Caller, id: string, patch: UpdateWebsiteBody): Promise<Website> {
    const website = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) => updateWebsite(tx, id, patch));
    if (!website) throw websiteNotFound();
    return website;
  }

  /** A new API key for the website, shown in full only here; the old key opens nothing from the commit on. */
  async function rotateApiKey(caller: Caller, id: string): Promise<Website & { apiKey: string }> {
    const apiKey = generateApiKey();
    const website = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) => replaceApiKey(tx, id, { hash: apiKey.hash, prefix: apiKey.prefix }));
    if (!website) throw websiteNotFound();
    return { ...website, apiKey: apiKey.key };
  }

  // The deletions running in this process: each website's at most once.
  const deletions = createRunningDeletions({ finish: finishDeletionElevated, log });

  /**
   * Deletion in two steps (docs/analytics.md, "Deleting a website"): the
   * caller's own short transaction marks the website, which hides it and ends
   * its key at commit; then batches, each a short statement of its own, remove
   * its rows and at last the website. No statement grows with the website, so
   * the statement timeout never stops it. The batches are a task of the
   * process (deletion/running.ts): the caller waits for them at most `waitMs`,
   * and learns whether the website is gone or its deletion goes on. Asked
   * again, it finishes a deletion that was cut short, or joins the one running.
   */
  async function removeWebsite(caller: Caller, id: string, { waitMs }: { waitMs: number }): Promise<DeletionOutcome> {
    const begun = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) => beginWebsiteDeletion(tx, id));
    if (!begun) throw websiteNotFound();
    return deletions.join(id, waitMs);
  }

  /** Elevated: deletes a marked website batch by batch; `stopped` is asked between batches. True once it is gone. */
  async function finishDeletionElevated(id: string, stopped: () => boolean): Promise<boolean> {
    let batchSize = deleteBatchSize;
    let failuresInARow = 0;
    while (!stopped()) {
      let deleted: number;
      try {
        [{ deleted }] = await db.bounded(deleteWebsiteBatchElevated(db.sql, id, batchSize));
      } catch (error) {
        failuresInARow += 1;
        if (!isBatchRetryable(error) || failuresInARow > BATCH_RETRIES) throw error;
        batchSize = Math.max(1, Math.floor(batchSize / 2));
        await setTimeout(retryDelayMs(failuresInARow, BATCH_RETRY_BACKOFF));
        continue;
      }
      failuresInARow = 0;
      if (deleted === 0) return true;
    }
    return false;
  }

  /**
   * Elevated: finishes the deletions a stopped process, or a failed one, left
   * behind, the longest begun first (joining those running here); how many it
   * found. One that fails (its rows held past every retry) does not hold up
   * the others: they are finished, then its error is thrown, and it waits for
   * the next sweep or DELETE. Stops when the deletions are stopped (shutdown).
   */
  async function finishLeftDeletionsElevated(): Promise<number> {
    const ids = await selectWebsiteIdsBeingDeletedElevated(db.sql);
    const failures: unknown[] = [];
    const failedIds: string[] = [];
    for (const id of ids) {
      if (deletions.isStopping()) break;
      try {
        await deletions.join(id);
      } catch (error) {
        failures.push(error);
        failedIds.push(id);
      }
    }
    if (failures.length > 0) throw new AggregateError(failures, `${failures.length} of ${ids.length} website deletions failed (${failedIds.join(', ')})`);
    return ids.length;
  }

  /** Elevated: the key itself is the credential. Anything else is simply not found. */
  async function findWebsiteByApiKeyElevated(apiKey: string): Promise<Website> {
    if (!isWellFormedApiKey(apiKey)) throw websiteNotFound();
    const [row] = await db.bounded(selectWebsiteByApiKeyHashElevated(db.sql, hashApiKey(apiKey)));
    if (!row) throw websiteNotFound();
    return toWebsite(row);
  }

  return {
    createWebsite,
    listWebsites,
    findWebsite,
    changeWebsite,
    rotateApiKey,
    removeWebsite,
    finishLeftDeletionsElevated,
    findWebsiteByApiKeyElevated,
    /** Stops every deletion after its current batch (the shutdown begins). */
    stopDeletions: deletions.stop,
    /** Waits at most `timeoutMs` for the deletions running here to end; whether they all did. */
    deletionsSettled: deletions.settled,
  };
}

export type WebsitesService = ReturnType<typeof createWebsitesService>;
