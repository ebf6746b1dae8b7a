import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import type postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { asUser, createAuthUser, grantRole, testSql } from './support/db.ts';
import { createWebsite } from './support/feedback-fixtures.ts';

// public.feedback_counts and public.feedback_count_changes, which the admin
// list's total is summed from
// (supabase/migrations/20261127100000_count_feedback_by_status_and_website.sql):
// after any mix of inserts, triage, moves between websites, deletes and a
// website's deletion they hold what `count(*)` over the feedback says,
// concurrent writers lose no change, and a submission does not wait for
// another one to commit.

const sql = testSql();
afterAll(() => sql.end());

type Status = 'pending' | 'resolved' | 'archived';
const STATUSES: Status[] = ['pending', 'resolved', 'archived'];

/** The stored total of every (status, website): its count plus the changes not yet folded in. */
const storedTotals = (tx: postgres.Sql | postgres.TransactionSql) => tx`
  (select status, website_id, sum(how_many)::int as total
     from (select status, website_id, total as how_many from public.feedback_counts
           union all
           select status, website_id, delta from public.feedback_count_changes) as parts
    group by status, website_id)`;

/**
 * Every (status, website) whose count and stored total differ, read in one
 * statement so that both sides are one snapshot while other files write.
 */
const mismatches = () => sql`
  select coalesce(counted.status, stored.status) as status, coalesce(counted.website_id, stored.website_id) as website_id,
         counted.rows, stored.total
    from (select status, website_id, count(*)::int as rows from public.feedback group by status, website_id) as counted
    full join ${storedTotals(sql)} as stored
      on stored.status = counted.status and stored.website_id is not distinct from counted.website_id
   where coalesce(counted.rows, 0) <> coalesce(stored.total, 0)`;

/** Triage columns that satisfy feedback_resolution_matches_status for `status`. */
const resolution = (status: Status) => (status === 'resolved' ? sql`now()` : sql`null`);

async function insertRows(websiteId: string | null, statuses: Status[], rating: number) {
  for (const status of statuses) {
    await sql`
      insert into public.feedback (name, email, comment, rating, status, resolved_at, website_id)
      values ('Counted Person', 'counted@example.test', 'Feedback for the counters', ${rating}, ${status}, ${resolution(status)}, ${websiteId})`;
  }
}

type Operation =
  | { kind: 'insert'; site: number; statuses: Status[]; rating: number }
  | { kind: 'insertMany'; site: number; status: Status; rows: number; rating: number }
  | { kind: 'triage'; site: number; rating: number; status: Status }
  | { kind: 'notes'; site: number }
  | { kind: 'move'; from: number; to: number; rating: number }
  | { kind: 'delete'; site: number; rating: number }
  | { kind: 'deleteWebsite'; site: number };

const site = fc.integer({ min: 0, max: 2 });
const rating = fc.integer({ min: 1, max: 5 });
const status = fc.constantFrom(...STATUSES);
const operation: fc.Arbitrary<Operation> = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), site, statuses: fc.array(status, { minLength: 1, maxLength: 3 }), rating }),
  fc.record({ kind: fc.constant('insertMany' as const), site, status, rows: fc.integer({ min: 1, max: 30 }), rating }),
  fc.record({ kind: fc.constant('triage' as const), site, rating, status }),
  fc.record({ kind: fc.constant('notes' as const), site }),
  fc.record({ kind: fc.constant('move' as const), from: site, to: site, rating }),
  fc.record({ kind: fc.constant('delete' as const), site, rating }),
  fc.record({ kind: fc.constant('deleteWebsite' as const), site }),
);

/** Applies `op` to this run's three websites (a deleted one is replaced, so there are always three). */
async function apply(op: Operation, sites: string[]) {
  switch (op.kind) {
    case 'insert':
      return insertRows(sites[op.site], op.statuses, op.rating);
    case 'insertMany':
      // One statement, many rows: one firing of the statement trigger.
      return sql`
        insert into public.feedback (name, email, comment, rating, status, resolved_at, website_id)
        select 'Counted Person', 'counted@example.test', 'Feedback for the counters', ${op.rating}, ${op.status}, ${resolution(op.status)}, ${sites[op.site]}
          from generate_series(1, ${op.rows})`;
    case 'triage':
      return sql`
        update public.feedback set status = ${op.status}, resolved_at = ${resolution(op.status)}, resolved_by = null
         where website_id = ${sites[op.site]} and rating >= ${op.rating}`;
    case 'notes':
      return sql`update public.feedback set admin_notes = 'seen' where website_id = ${sites[op.site]}`;
    case 'move':
      return sql`update public.feedback set website_id = ${sites[op.to]} where website_id = ${sites[op.from]} and rating <= ${op.rating}`;
    case 'delete':
      return sql`delete from public.feedback where website_id = ${sites[op.site]} and rating = ${op.rating}`;
    case 'deleteWebsite':
      // feedback.website_id is `on delete set null`: the rows move to no website.
      await sql`delete from public.websites where id = ${sites[op.site]}`;
      sites[op.site] = await createWebsite(sql, 'Counted site');
      return;
  }
}

describe('feedback_counts', () => {
  it('holds what count(*) says after any sequence of inserts, triage, moves and deletes', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(operation, { minLength: 1, maxLength: 10 }), async (operations) => {
        const sites = [await createWebsite(sql, 'Counted site'), await createWebsite(sql, 'Counted site'), await createWebsite(sql, 'Counted site')];
        for (const op of operations) {
          await apply(op, sites);
          expect(await mismatches()).toEqual([]);
        }
        // And for this run's websites by name: what the list's filters sum.
        for (const websiteId of sites) {
          for (const wanted of STATUSES) {
            const [{ counted, stored }] = await sql`
              select (select count(*)::int from public.feedback where website_id = ${websiteId} and status = ${wanted}) as counted,
                     (select coalesce(sum(total), 0)::int from ${storedTotals(sql)} as stored where website_id = ${websiteId} and status = ${wanted}) as stored`;
            expect(stored).toBe(counted);
          }
        }
      }),
      { numRuns: 25 },
    );
  });

  it('keeps no counter at zero, and a website whose feedback is gone sums to zero', async () => {
    const websiteId = await createWebsite(sql, 'Emptied site');
    for (let round = 0; round < 5; round++) {
      await insertRows(websiteId, ['pending', 'archived', 'pending'], 3);
      await sql`delete from public.feedback where website_id = ${websiteId}`;
    }
    expect(await sql`select * from public.feedback_counts where website_id = ${websiteId} and total = 0`).toEqual([]);
    expect(await sql`select * from ${storedTotals(sql)} as stored where website_id = ${websiteId} and total <> 0`).toEqual([]);
  });

  it("a submission does not wait for another one's commit to the same website", async () => {
    const websiteId = await createWebsite(sql, 'Popular site');
    const submit = (tx: postgres.TransactionSql) =>
      tx`insert into public.feedback (name, email, comment, rating, website_id) values ('Quick Person', 'quick@example.test', 'Submitted while another waits', 4, ${websiteId})`;
    let release = () => {};
    const released = new Promise<void>((resolve) => (release = resolve));
    let held = () => {};
    const holding = new Promise<void>((resolve) => (held = resolve));
    // One submission inserted and not yet committed, as one waiting on its COMMIT's round trip is.
    const open = sql.begin(async (tx) => {
      await submit(tx);
      held();
      await released;
    });
    await holding;
    // With one counter row a key, every one of these waited for it and timed
    // out; with 16 shards a key, about one in 16. Now they append their
    // change and leave the folding to the open one.
    let committed = 0;
    try {
      for (let attempt = 0; attempt < 20; attempt++) {
        await sql
          .begin(async (tx) => {
            await tx`set local lock_timeout = '100ms'`;
            await submit(tx);
          })
          .then(
            () => (committed += 1),
            (error: { code?: string }) => expect(error.code).toBe('55P03'),
          );
      }
    } finally {
      release();
      await open;
    }
    expect(committed).toBe(20);
    expect(await mismatches()).toEqual([]);
  });

  it('is emptied by a truncate of the feedback (rolled back: other files share this table)', async () => {
    await insertRows(null, ['pending'], 2);
    await sql
      .begin(async (tx) => {
        await tx`truncate public.feedback cascade`;
        expect(await tx`select * from public.feedback_counts`).toEqual([]);
        expect(await tx`select * from public.feedback_count_changes`).toEqual([]);
        throw new Error('rollback');
      })
      .catch((error: Error) => {
        if (error.message !== 'rollback') throw error;
      });
    expect(await mismatches()).toEqual([]);
  });

  it('counts every change of concurrent writers whose statements cross the same keys', async () => {
    const [first, second] = [await createWebsite(sql, 'Busy site'), await createWebsite(sql, 'Busy site')];
    // Forty rows a writer, so no two writers touch the same feedback row; every writer touches every key.
    const writers = 8;
    const tags = Array.from({ length: writers }, () => randomUUID());
    for (const tag of tags) {
      await sql`
        insert into public.feedback (name, email, comment, rating, website_id)
        select ${tag}, 'busy@example.test', 'Feedback for concurrent writers', 1 + i % 5, case when i % 2 = 0 then ${first}::uuid else ${second}::uuid end
          from generate_series(1, 40) as i`;
    }
    const connections = Array.from({ length: writers }, () => testSql());
    try {
      // Each statement moves rows of both websites between statuses, in a
      // transaction held open for a moment so the writers overlap; even and
      // odd writers go through the statuses in opposite orders.
      const rounds = STATUSES.flatMap((from) => STATUSES.filter((to) => to !== from).map((to) => [from, to] as const));
      await Promise.all(
        connections.map((connection, writer) =>
          (async () => {
            const order = writer % 2 === 0 ? rounds : [...rounds].reverse();
            for (const [from, to] of order) {
              await connection.begin(async (tx) => {
                await tx`
                  update public.feedback set status = ${to}, resolved_at = ${to === 'resolved' ? tx`now()` : tx`null`}
                   where name = ${tags[writer]} and status = ${from}`;
                await tx`select pg_sleep(0.01)`;
              });
            }
          })(),
        ),
      );
    } finally {
      await Promise.all(connections.map((connection) => connection.end()));
    }
    expect(await mismatches()).toEqual([]);
    const [{ total }] = await sql`select sum(total)::int as total from ${storedTotals(sql)} as stored where website_id in (${first}, ${second})`;
    expect(total).toBe(writers * 40);
  });
});

describe('who reads feedback_counts', () => {
  it('admins read the totals; other signed-in users read none; anon and the counters themselves are out of reach', async () => {
    const websiteId = await createWebsite(sql, 'Private counts');
    await insertRows(websiteId, ['pending', 'pending', 'resolved'], 4);
    const admin = await createAuthUser(sql, { name: 'Counts Admin' });
    await grantRole(sql, admin.id, 'admin');
    const viewer = await createAuthUser(sql, { name: 'Counts Viewer' });
    await grantRole(sql, viewer.id, 'viewer');
    const totals = (userId: string) =>
      asUser(sql, userId, (tx) => tx`select status, total from ${storedTotals(tx)} as stored where website_id = ${websiteId} order by status`);

    expect(await totals(admin.id)).toEqual([
      { status: 'pending', total: 2 },
      { status: 'resolved', total: 1 },
    ]);
    expect(await totals(viewer.id)).toEqual([]);
    await expect(asUser(sql, null, (tx) => tx`select * from public.feedback_counts`)).rejects.toMatchObject({ code: '42501' });
    await expect(asUser(sql, null, (tx) => tx`select * from public.feedback_count_changes`)).rejects.toMatchObject({ code: '42501' });
    for (const write of [
      (tx: postgres.TransactionSql) => tx`update public.feedback_counts set total = 0`,
      (tx: postgres.TransactionSql) => tx`insert into public.feedback_counts (status, total) values ('pending', 1000)`,
      (tx: postgres.TransactionSql) => tx`insert into public.feedback_count_changes (status, delta) values ('pending', 1000)`,
      (tx: postgres.TransactionSql) => tx`delete from public.feedback_count_changes`,
    ]) {
      await expect(asUser(sql, admin.id, write)).rejects.toMatchObject({ code: '42501' });
    }
  });
});
