import type { FastifyBaseLogger } from 'fastify';
import { type BackoffPolicy, retryDelayMs } from '../../../lib/backoff.ts';
import type { ElevatedSql } from '../../../plugins/db.ts';
import { type ClaimedNotification, markNotificationsSentElevated } from './queries.ts';

// Marks notifications sent as their sends end, in small groups: while one
// UPDATE runs, the sends that end meanwhile wait for the next one. A whole
// batch per statement left every sent row unmarked until the batch's slowest
// send ended (a stop or crash then sent them all again); a statement per row
// cost a commit per e-mail and a round trip between each sender's sends. A
// group that fails is marked again row by row, so a row that cannot be
// written (e.g. a lock held elsewhere) keeps no other row unmarked.
//
// A mark that fails is tried again, with backoff, until it is written or the
// claim's lease ends (`retryUntil`): the row is ours until then, and a row
// left unmarked is sent again once the lease runs out. Marks were tried once:
// a database down for 8 s left 84 of 3,084 e-mails sent twice. While marks
// fail, `writable()` holds the batch's next sends back: a database that is
// down fails every later mark too, and each send then would be one more
// e-mail sent and unmarked.

/** Backoff between tries of failed marks: a database back after a few seconds is heard of within one. */
export const MARK_RETRY: BackoffPolicy = { baseMs: 50, maxMs: 1_000 };

export interface SentNotification {
  claim: ClaimedNotification;
  providerMessageId?: string;
}

export interface SentMarksOptions {
  /** `performance.now()` after which a failed mark is not tried again: the end of the claim's lease, or of a stop's wait. */
  retryUntil: () => number;
  retry?: BackoffPolicy;
}

interface Unmarked {
  sent: SentNotification;
  error: unknown;
}

export type SentMarks = ReturnType<typeof createSentMarks>;

export function createSentMarks(sql: ElevatedSql, log: FastifyBaseLogger, transport: string, { retryUntil, retry = MARK_RETRY }: SentMarksOptions) {
  const waiting: SentNotification[] = [];
  let writing: Promise<void> | undefined;
  /** From a mark statement that failed until a round writes one again. */
  let failing = false;
  /** Failed marks were given up at the end of the lease: the batch starts no more sends. */
  let gaveUp = false;
  let waitingToSend: ((writable: boolean) => void)[] = [];

  function answerWaiting(writable: boolean) {
    for (const resolve of waitingToSend.splice(0)) resolve(writable);
  }

  const contextOf = ({ claim }: SentNotification) => ({ outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts, transport });

  /** Writes a group's marks; returns the rows it could not write. */
  async function markGroup(group: SentNotification[]): Promise<Unmarked[]> {
    let marked: Set<string>;
    try {
      marked = await markNotificationsSentElevated(sql, group);
    } catch (error) {
      failing = true; // at once, before the split: no send starts meanwhile
      if (group.length > 1) return (await Promise.all(group.map((sent) => markGroup([sent])))).flat();
      return [{ sent: group[0], error }];
    }
    for (const sent of group) {
      if (marked.has(sent.claim.id)) log.info(contextOf(sent), 'feedback notification sent');
      else log.warn(contextOf(sent), 'feedback notification sent after its claim ran out');
    }
    return [];
  }

  function giveUp(unmarked: Unmarked[]) {
    gaveUp = true;
    answerWaiting(false);
    for (const { sent, error } of unmarked) log.error({ ...contextOf(sent), err: error }, 'feedback notification sent but not marked; sent again when its claim runs out');
  }

  async function writeWaiting(): Promise<void> {
    let unmarked: Unmarked[] = [];
    let failedRounds = 0;
    for (;;) {
      const group = [...unmarked.map(({ sent }) => sent), ...waiting.splice(0)];
      // In the same tick as the last check, so a send that ends later starts a new write.
      if (group.length === 0) break;
      unmarked = await markGroup(group);
      if (unmarked.length < group.length && failing) {
        // The database answers again: the batch may send on.
        failing = false;
        answerWaiting(true);
      }
      if (unmarked.length === 0) {
        failedRounds = 0;
        continue;
      }
      failedRounds += 1;
      const leftMs = retryUntil() - performance.now();
      if (leftMs <= 0) {
        giveUp(unmarked);
        unmarked = [];
        continue;
      }
      const retryInMs = Math.min(retryDelayMs(failedRounds, retry), leftMs);
      log.warn(
        { outboxIds: unmarked.map(({ sent }) => sent.claim.id), err: unmarked[0].error, retryInMs },
        'feedback notifications sent but not marked; marks tried again, no new send until they are written',
      );
      await new Promise((resolve) => setTimeout(resolve, retryInMs));
    }
    writing = undefined;
  }

  return {
    /** Queues a sent notification; it is written with the next group. */
    add(sent: SentNotification): void {
      waiting.push(sent);
      writing ??= writeWaiting();
    },
    /**
     * Whether the batch may start another send: at once while marks are
     * written; while they fail, true when one is written again, false when
     * they were given up (the lease is ending; the rows not started wait for it).
     */
    writable(): Promise<boolean> {
      if (gaveUp) return Promise.resolve(false);
      if (!failing) return Promise.resolve(true);
      return new Promise((resolve) => waitingToSend.push(resolve));
    },
    /** Resolves when every notification added so far is marked (or its mark was given up and logged). */
    async settled(): Promise<void> {
      while (writing) await writing;
    },
  };
}
