import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { addDays } from '../src/modules/analytics/dates.ts';
import { getTopDimensionValues } from '../src/modules/analytics/dimension-queries.ts';
import { memberCutoffDay, pruneExpiredMembersElevated } from '../src/modules/analytics/retention/worker.ts';
import { type FixtureEvent, insertEvents } from './support/analytics.ts';
import { fromRollups, reference } from './support/analytics-reference.ts';
import { testSql } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// The rollups must give exactly what the metric definitions give over the raw
// events, for every range of days, whatever order and grouping the events
// arrive in (several statements, some at the same time). The reference
// (support/analytics-reference.ts) computes each metric from
// analytics_events straight from its definition in docs/analytics.md.

const sql = testSql();
afterAll(() => sql.end());

const FIRST_DAY = '2026-05-01';
const DAYS = 5;

async function newWebsite(db = sql): Promise<string> {
  const [row] = await db`
    insert into public.websites (name, domain, api_key_hash, api_key_prefix)
    values ('Rollup property', 'rollup.example.test', ${randomBytes(32)}, 'wsk_test') returning id`;
  return row.id;
}

const eventArbitrary = fc.record({
  type: fc.constantFrom('page_view', 'page_view', 'click', 'custom') as fc.Arbitrary<FixtureEvent['type']>,
  page: fc.constantFrom('/', '/a', '/b', '/c'),
  session: fc.constantFrom('s0', 's1', 's2', 's3', 's4', 's5'),
  visitor: fc.constantFrom('v0', 'v1', 'v2', 'v3'),
  device: fc.constantFrom('desktop', 'mobile', 'tablet') as fc.Arbitrary<FixtureEvent['device']>,
  day: fc.integer({ min: 0, max: DAYS - 1 }),
  // Some events right around midnight.
  msOfDay: fc.oneof(fc.integer({ min: 0, max: 86_399_999 }), fc.constantFrom(0, 999, 86_399_000, 86_399_999)),
  referrerHost: fc.option(fc.constantFrom('google.com', 'bing.com', 'example.org'), { nil: undefined }),
  loadTime: fc.option(fc.integer({ min: 1, max: 5000 }), { nil: undefined }),
  // A visitor may show up from two countries (travelling) or with two campaigns: counted for each.
  country: fc.option(fc.constantFrom('DE', 'US', 'FR'), { nil: undefined }),
  campaign: fc.option(
    fc.record({ source: fc.constantFrom('google', 'newsletter'), medium: fc.constantFrom('cpc', 'email'), name: fc.constantFrom('spring', 'autumn') }),
    { nil: undefined },
  ),
  chunk: fc.integer({ min: 0, max: 3 }),
});

type GeneratedEvent = typeof eventArbitrary extends fc.Arbitrary<infer T> ? T : never;

describe('rollups equal the metric definitions over raw events', () => {
  it('for every range, whatever the arrival order and grouping', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(eventArbitrary, { minLength: 1, maxLength: 40 }), fc.boolean(), async (generated, concurrent) => {
        const websiteId = await newWebsite();
        const chunks = [0, 1, 2, 3].map((chunk) =>
          generated
            .filter((event) => event.chunk === chunk)
            .map(({ day, msOfDay, ...event }) => ({
              ...event,
              at: new Date(Date.parse(`${addDays(FIRST_DAY, day)}T00:00:00Z`) + msOfDay).toISOString(),
            })),
        );
        if (concurrent) await Promise.all(chunks.map((events) => insertEvents(sql, websiteId, events)));
        else for (const events of chunks.reverse()) await insertEvents(sql, websiteId, events);

        await sql.begin(async (tx) => {
          for (let start = -1; start <= DAYS; start += 1) {
            for (let end = start; end <= DAYS; end += 1) {
              const range = { websiteId, startDate: addDays(FIRST_DAY, start), endDate: addDays(FIRST_DAY, end) };
              const [expected, actual] = await Promise.all([reference(tx, range), fromRollups(tx, range)]);
              expect(actual, `${range.startDate}..${range.endDate}`).toEqual(expected);
            }
          }
        });
      }),
      { numRuns: 50 },
    );
  }, 120_000);
});

// Retention deletes the member rows (visitor, session and dimension days) of
// old days. Time moves forward here in steps: each step's events are of its
// day or the day before (a batch just after midnight), in several statements;
// then member rows are pruned before the worker's cut-off, scaled down to a
// longest range of LONGEST days, sometimes while the events are being written.
// Every range of at most LONGEST days must still give what the raw events
// (kept here) give, old ranges whose member rows are gone included.
describe('rollups stay exact when member rows are pruned past retention', () => {
  const database = usePrivateDatabase('member_prune', { max: 4 });
  const LONGEST = 3;
  const START_DAYS = 6;
  let pruned = 0;

  const toFixture = (day: string, { msOfDay, ...event }: Omit<GeneratedEvent, 'day'>): FixtureEvent & { chunk: number } => ({
    ...event,
    at: new Date(Date.parse(`${day}T00:00:00Z`) + msOfDay).toISOString(),
  });
  const insertInChunks = async (websiteId: string, events: (FixtureEvent & { chunk: number })[]) => {
    for (const chunk of [3, 1, 2, 0]) await insertEvents(database.sql, websiteId, events.filter((event) => event.chunk === chunk));
  };
  const stepArbitrary = fc.record({
    advance: fc.integer({ min: 1, max: 3 }),
    // Relative to the step's day: 0 today, 1 yesterday.
    events: fc.array(fc.record({ back: fc.integer({ min: 0, max: 1 }), event: eventArbitrary }), { maxLength: 12 }),
    eventsCutoffBack: fc.integer({ min: 0, max: 8 }),
    batchSize: fc.integer({ min: 1, max: 7 }),
    concurrent: fc.boolean(),
  });

  it('for every range of at most the longest length, whatever was pruned before it', async () => {
    const db = database.sql;
    await fc.assert(
      fc.asyncProperty(fc.array(eventArbitrary, { minLength: 1, maxLength: 30 }), fc.array(stepArbitrary, { minLength: 1, maxLength: 4 }), async (initial, steps) => {
        const websiteId = await newWebsite(db);
        const firstDay = '2026-05-01';
        await insertInChunks(websiteId, initial.map(({ day, ...event }) => toFixture(addDays(firstDay, day % START_DAYS), event)));
        let today = addDays(firstDay, START_DAYS - 1);
        let cutoff = firstDay;
        for (const step of steps) {
          today = addDays(today, step.advance);
          const events = step.events.map(({ back, event: { day: _day, ...event } }) => toFixture(addDays(today, -back), event));
          cutoff = memberCutoffDay(today, addDays(today, -step.eventsCutoffBack), LONGEST);
          const prune = () => pruneExpiredMembersElevated(db, cutoff, { batchSize: step.batchSize });
          const [{ total }] = step.concurrent
            ? await Promise.all([prune(), insertInChunks(websiteId, events)])
            : [await prune(), await insertInChunks(websiteId, events)];
          pruned += total;
        }

        const [left] = await db`
          select (select count(*) from public.analytics_distinct_days where website_id = ${websiteId} and day < ${cutoff})
               + (select count(*) from public.analytics_dimension_days where website_id = ${websiteId} and day < ${cutoff})
               + (select count(*) from public.analytics_session_days where website_id = ${websiteId} and day < ${cutoff}) as old`;
        expect(Number(left.old)).toBe(0);
        await db.begin(async (tx) => {
          for (let start = addDays(firstDay, -1); start <= addDays(today, 1); start = addDays(start, 1)) {
            for (let length = 1; length <= LONGEST; length += 1) {
              const range = { websiteId, startDate: start, endDate: addDays(start, length - 1) };
              const [expected, actual] = await Promise.all([reference(tx, range), fromRollups(tx, range)]);
              expect(actual, `${range.startDate}..${range.endDate} (members pruned before ${cutoff})`).toEqual(expected);
            }
          }
        });
      }),
      // Not shrunk: a run is a few hundred statements, and shrinking a failure outlasted the timeout.
      { numRuns: 20, endOnFailure: true },
    );
    // Not vacuous: the runs did delete member rows.
    expect(pruned).toBeGreaterThan(100);
  }, 240_000);
});

describe('the top values of the four dimensions, read in one statement', () => {
  it('each dimension gets its own top list: twelve values in each, the ten with the most visitors in order', async () => {
    const websiteId = await newWebsite();
    // Value i of every dimension has i visitors; each dimension names its values apart.
    const letters = 'ABCDEFGHIJKL';
    const events: FixtureEvent[] = [];
    for (let i = 1; i <= 12; i++) {
      for (let v = 0; v < i; v++) {
        events.push({
          page: '/', session: `s-${i}-${v}`, visitor: `v-${i}-${v}`, device: 'desktop', at: `${FIRST_DAY}T12:00:00Z`,
          country: `X${letters[i - 1]}`, campaign: { source: `source-${i}`, medium: `medium-${i}`, name: `name-${i}` },
        });
      }
    }
    await insertEvents(sql, websiteId, events);
    const top = await sql.begin((tx) => getTopDimensionValues(tx, { websiteId, startDate: FIRST_DAY, endDate: FIRST_DAY }, 10));
    const expected = (name: (i: number) => string) => [12, 11, 10, 9, 8, 7, 6, 5, 4, 3].map((i) => ({ value: name(i), visitors: i }));
    expect(top).toEqual({
      country: expected((i) => `X${letters[i - 1]}`),
      utm_source: expected((i) => `source-${i}`),
      utm_medium: expected((i) => `medium-${i}`),
      utm_campaign: expected((i) => `name-${i}`),
    });
  });
});
