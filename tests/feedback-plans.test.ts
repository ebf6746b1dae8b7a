import { afterAll, describe, expect, inject, it } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import { listFeedback } from '../src/modules/feedback/queries.ts';
import { createFeedbackService } from '../src/modules/feedback/service.ts';
import type { ListFeedbackQuery } from '../src/modules/feedback/schemas.ts';
import type { Caller } from '../src/plugins/auth.ts';
import { connectDatabase } from '../src/plugins/db.ts';
import { asUser, createAuthUser, grantRole, readsDuring } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// The admin list's page on its generic plan when it has no filter, and
// planned for its values when it has one (src/modules/feedback/service.ts;
// docs/performance.md). Read off pg_prepared_statements of the pool's one
// connection, where PostgreSQL counts each kind of plan a statement ran on.

const db = connectDatabase(asLoginRole(inject('stack').databaseUrl), { max: 1 });
afterAll(() => db.close());

// Lists only: the bot check is for submissions.
const feedback = createFeedbackService({ db, captcha: { enabled: false, verify: async () => 'passed' } });
const admin: Caller = { kind: 'legacy-admin', userId: 'plans-test', roles: ['admin'] };
const page = { order: 'desc', limit: 20, offset: 0 } as const;

/** How often the page statement matching `pattern` ran on each kind of plan. */
async function pagePlans(pattern: string) {
  const rows = await db.sql<{ generic: number; custom: number }[]>`
    select generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements
     where statement like '%from public.feedback%limit $%' and statement like ${pattern}`;
  expect(rows).toHaveLength(1);
  return rows[0];
}

describe('the feedback list’s plans', () => {
  it('runs the unfiltered page on its generic plan from the first run: the first page reading its rows, a later one its ids first', async () => {
    for (let run = 0; run < 7; run++) await feedback.listFeedback(admin, page as ListFeedbackQuery);
    expect(await pagePlans('select %from public.feedback where true order by%limit $1 offset $2')).toEqual({ generic: 7, custom: 0 });
    for (let run = 1; run <= 7; run++) await feedback.listFeedback(admin, { ...page, offset: run } as ListFeedbackQuery);
    expect(await pagePlans('%any (array(select id from public.feedback where true order by%limit $1 offset $2))%')).toEqual({ generic: 7, custom: 0 });
  });

  it('plans a filtered page for its values, as PostgreSQL chooses', async () => {
    for (let run = 0; run < 7; run++) await feedback.listFeedback(admin, { ...page, status: 'archived' } as ListFeedbackQuery);
    const plans = await pagePlans('%status = $1%');
    expect(plans.generic + plans.custom).toBe(7);
    // PostgreSQL's first five runs of a statement left to it are always planned for their values.
    expect(plans.custom).toBeGreaterThanOrEqual(5);
  });
});

// Counted, not timed, on a table of 20,000 rows: on a generic plan PostgreSQL
// cannot see `limit $1 offset $2`, takes the page for a tenth of the table,
// and joined to the rows by id it hashed the whole table to find 20.
describe('a later page of the unfiltered list, on its generic plan', () => {
  const database = usePrivateDatabase('list_pages');

  it("reads the page's index entries and its rows, never the whole table", async () => {
    const { sql } = database;
    await sql`
      insert into public.feedback (name, email, comment, rating, created_at)
      select 'Name ' || g, 'pages@example.test', 'A comment long enough', 3, now() - g * interval '1 second'
        from generate_series(1, 20000) g`;
    await sql`vacuum analyze public.feedback`;
    const user = await createAuthUser(sql);
    await grantRole(sql, user.id, 'admin');
    const offset = 1_000;
    await asUser(sql, user.id, async (tx) => {
      await tx`select set_config('plan_cache_mode', 'force_generic_plan', true)`;
      for (let run = 0; run < 7; run++) {
        const { result, reads } = await readsDuring(tx, ['feedback'], () => listFeedback(tx, {}, { order: 'desc', limit: 20, offset }));
        expect(result.map((item) => item.name), `run ${run}`).toEqual(Array.from({ length: 20 }, (_, index) => `Name ${offset + index + 1}`));
        expect(reads[0].seqScans, `run ${run}`).toBe(0);
        // The skipped entries and the page's in the creation index, then the page's 20 in the primary key.
        expect(reads[0].indexEntries, `run ${run}`).toBeLessThanOrEqual(offset + 20 + 20);
      }
    });
  });
});
