import type { FastifyBaseLogger } from 'fastify';
import type { ElevatedSql } from '../../../plugins/db.ts';
import { type ClaimedNotification, markNotificationsSentElevated } from './queries.ts';

// Marks notifications sent as their sends end, in small groups: while one
// UPDATE runs, the sends that end meanwhile wait for the next one. A whole
// batch per statement left every sent row unmarked until the batch's slowest
// send ended (a stop or crash then sent them all again); a statement per row
// cost a commit per e-mail and a round trip between each sender's sends. A
// group that fails is marked again row by row, so a row that cannot be
// written (e.g. a lock held elsewhere) keeps no other row unmarked.

export interface SentNotification {
  claim: ClaimedNotification;
  providerMessageId?: string;
}

export type SentMarks = ReturnType<typeof createSentMarks>;

export function createSentMarks(sql: ElevatedSql, log: FastifyBaseLogger, transport: string) {
  const waiting: SentNotification[] = [];
  let writing: Promise<void> | undefined;

  async function markGroup(group: SentNotification[]): Promise<void> {
    let marked: Set<string>;
    try {
      marked = await markNotificationsSentElevated(sql, group);
    } catch (error) {
      if (group.length > 1) return void (await Promise.all(group.map((sent) => markGroup([sent]))));
      const { claim } = group[0];
      log.error({ outboxId: claim.id, feedbackId: claim.feedbackId, err: error }, 'feedback notification sent but not marked; sent again when its claim runs out');
      return;
    }
    for (const { claim } of group) {
      const context = { outboxId: claim.id, feedbackId: claim.feedbackId, attempts: claim.attempts, transport };
      if (marked.has(claim.id)) log.info(context, 'feedback notification sent');
      else log.warn(context, 'feedback notification sent after its claim ran out');
    }
  }

  async function writeWaiting(): Promise<void> {
    while (waiting.length > 0) await markGroup(waiting.splice(0));
    // In the same tick as the last check, so a send that ends later starts a new write.
    writing = undefined;
  }

  return {
    /** Queues a sent notification; it is written with the next group. */
    add(sent: SentNotification): void {
      waiting.push(sent);
      writing ??= writeWaiting();
    },
    /** Resolves when every notification added so far is marked (or its mark failed and was logged). */
    async settled(): Promise<void> {
      while (writing) await writing;
    },
  };
}
