import type { FastifyInstance } from 'fastify';
import type postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { memberCutoffDay, pruneExpiredEventsElevated, pruneExpiredMembersElevated, retentionCutoff } from '../src/modules/analytics/retention/worker.ts';
import { buildTestApp } from './support/app.ts';
import { createWebsite, type FixtureEvent, insertEvents, type TestWebsite } from './support/analytics.ts';
import { asUser, createAuthUser, grantRole, openTransaction, readsDuring, testSql, untilWaitingOnLock } from './support/db.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// Retention: raw events before the cut-off are deleted in batches; the
// rollups keep every figure exact, and later events still link to the days
// whose raw events are gone. Old events here are from 2019 so that no other
// test's rows are older than the cut-off used.

const sql = testSql();
afterAll(() => sql.end());

describe('retention cut-off', () => {
  it.each([
    ['2026-11-23T15:00:00Z', 13, '2025-10-23T00:00:00.000Z'],
    ['2026-03-31T00:00:00Z', 1, '2026-02-28T00:00:00.000Z'],
    ['2028-03-31T23:59:59Z', 1, '2028-02-29T00:00:00.000Z'],
    ['2026-01-15T08:00:00Z', 24, '2024-01-15T00:00:00.000Z'],
  ])('%s minus %i months → %s', (now, months, expected) => {
    expect(retentionCutoff(new Date(now), months).toISOString()).toBe(expected);
  });
});

describe('member cut-off', () => {
  it.each([
    // 13 months: the events' cut-off is the earlier.
    ['2026-11-29', '2025-10-29', '2025-10-29'],
    // 1 month: kept a year and two days more (the longest range, 367 days, and a day), whatever the events'.
    ['2026-11-29', '2026-10-29', '2025-11-26'],
    ['2028-03-01', '2028-02-01', '2027-02-27'],
  ])('today %s, events before %s → member rows before %s', (today, eventsCutoff, expected) => {
    expect(memberCutoffDay(today, eventsCutoff)).toBe(expected);
  });
});

describe('deleting expired events', () => {
  let app: FastifyInstance;
  let site: TestWebsite;
  const OLD: FixtureEvent[] = [
    { session: 'o1', visitor: 'vA', device: 'desktop', page: '/', at: '2019-06-01T10:00:00Z', country: 'DE', loadTime: 100 },
    { session: 'o1', visitor: 'vA', device: 'desktop', page: '/a', at: '2019-06-01T10:05:00Z', country: 'DE' },
    { session: 'o2', visitor: 'vB', device: 'mobile', page: '/', at: '2019-06-02T11:00:00Z', referrerHost: 'example.org' },
    { session: 'o3', visitor: 'vA', device: 'desktop', page: '/b', at: '2019-12-31T23:59:00Z', country: 'DE' },
    { session: 'o3', visitor: 'vA', device: 'desktop', page: '/c', at: '2020-01-01T00:01:00Z', country: 'DE' },
  ];

  beforeAll(async () => {
    app = await buildTestApp();
    site = await createWebsite(app, 'Retention');
    await insertEvents(sql, site.id, OLD);
  });
  afterAll(async () => app?.close());

  const summary = async (startDate: string, endDate: string) => {
    const response = await app.inject({
      method: 'GET',
      url: `/api/analytics?websiteId=${site.id}&startDate=${startDate}&endDate=${endDate}`,
      headers: { 'x-api-key': site.apiKey },
    });
    expect(response.statusCode).toBe(200);
    return response.json().data;
  };

  it('removes raw events before the cut-off in batches; summaries of those days do not change', async () => {
    const before = [await summary('2019-06-01', '2019-06-30'), await summary('2019-12-01', '2020-01-31')];
    const deleted = await pruneExpiredEventsElevated(sql, { cutoff: new Date('2020-01-01T00:00:00Z'), batchSize: 2 });
    // Other tests' events are all newer than 2020.
    expect(deleted).toBe(4);
    const left = await sql`select page, created_at from public.analytics_events where website_id = ${site.id}`;
    expect(left.map((row) => row.page)).toEqual(['/c']);
    expect([await summary('2019-06-01', '2019-06-30'), await summary('2019-12-01', '2020-01-31')]).toEqual(before);
    expect(before[0]).toMatchObject({ pageViews: 3, uniqueVisitors: 2, sessions: 2, countries: [{ country: 'DE', visitors: 1 }] });
    // Nothing left to delete: a second run finds nothing.
    expect(await pruneExpiredEventsElevated(sql, { cutoff: new Date('2020-01-01T00:00:00Z'), batchSize: 2 })).toBe(0);
  });

  const memberRows = async () => {
    const rows = await sql<{ kind: string; day: string }[]>`
      select 'distinct' as kind, to_char(day, 'YYYY-MM-DD') as day from public.analytics_distinct_days where website_id = ${site.id}
      union all select 'dimension', to_char(day, 'YYYY-MM-DD') from public.analytics_dimension_days where website_id = ${site.id}
      union all select 'session', to_char(day, 'YYYY-MM-DD') from public.analytics_session_days where website_id = ${site.id}`;
    return rows.map((row) => `${row.kind} ${row.day}`).sort();
  };

  it('deletes visitor, session and dimension days before the member cut-off and keeps the rest; summaries stay', async () => {
    const before = [await summary('2019-06-01', '2019-06-30'), await summary('2019-12-01', '2020-01-31')];
    const kept = (await memberRows()).filter((row) => row.endsWith('2020-01-01'));
    // vA (visitor, desktop session o3, country DE) on 2020-01-01.
    expect(kept).toEqual(['dimension 2020-01-01', 'distinct 2020-01-01', 'distinct 2020-01-01', 'session 2020-01-01']);
    // Other tests' rows are all of days after 2020.
    const first = await pruneExpiredMembersElevated(sql, '2020-01-01', { batchSize: 2 });
    expect(first).toEqual({ total: 11, finished: true });
    expect(await memberRows()).toEqual(kept);
    expect([await summary('2019-06-01', '2019-06-30'), await summary('2019-12-01', '2020-01-31')]).toEqual(before);
    expect(await pruneExpiredMembersElevated(sql, '2020-01-01', { batchSize: 2 })).toEqual({ total: 0, finished: true });
  });

  it('a visitor seen before the deleted days is still counted once with later events', async () => {
    await insertEvents(sql, site.id, [{ session: 'n1', visitor: 'vA', device: 'desktop', page: '/', at: '2020-02-01T09:00:00Z', country: 'DE' }]);
    const span = await summary('2019-06-01', '2020-02-29');
    expect(span).toMatchObject({ uniqueVisitors: 2, countries: [{ country: 'DE', visitors: 1 }] });
  });

  it('events stay append-only for everyone else; API roles cannot call the retention functions', async () => {
    await expect(sql`delete from public.analytics_events where website_id = ${site.id}`).rejects.toMatchObject({ code: '55000' });
    const admin = await createAuthUser(sql);
    await grantRole(sql, admin.id, 'admin');
    await expect(
      asUser(sql, admin.id, (tx) => tx`select public.delete_analytics_events_before(now(), 10)`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(sql`select public.delete_analytics_events_before(now(), 0)`).rejects.toMatchObject({ code: '22023' });
    await expect(
      asUser(sql, admin.id, (tx) => tx`select public.delete_analytics_members_before(current_date, 10)`),
    ).rejects.toMatchObject({ code: '42501' });
    await expect(sql`select public.delete_analytics_members_before(current_date, 0)`).rejects.toMatchObject({ code: '22023' });
    await expect(sql`select public.delete_analytics_members_before('-infinity', 10)`).rejects.toMatchObject({ code: '22023' });
  });
});

describe('a member batch and a returning session', () => {
  // Days of 2018: older than any other test's rows, and after none of this file's 2019 ones.
  it('deletes the old day a trigger relinked while the batch waited for the website', async () => {
    const [site] = await sql<{ id: string }[]>`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('Member race', 'member-race.example', sha256('member race'), 'wsk_memberra') returning id`;
    const event = (at: string): FixtureEvent => ({ session: 'r1', visitor: 'vR', device: 'desktop', page: '/', at });
    await insertEvents(sql, site.id, [event('2018-01-10T10:00:00Z')]);
    // The session comes back: its trigger relinks the old session day (next_day) and keeps the website's lock.
    const writer = await openTransaction(sql, (tx) => insertEvents(tx as unknown as postgres.Sql, site.id, [event('2018-03-01T10:00:00Z')]));
    // The batch picks the old rows as committed, then waits for that lock.
    const pruning = pruneExpiredMembersElevated(sql, '2018-02-01', { batchSize: 100 });
    expect(await untilWaitingOnLock(sql, 'delete_analytics_members_before')).toBe(true);
    await writer.commit();
    // The visitor's and the desktop session's day, and the session day, whose address changed.
    expect(await pruning).toEqual({ total: 3, finished: true });
    const [left] = await sql<{ old: number; kept: number }[]>`
      select count(*) filter (where day < '2018-02-01')::int as old, count(*) filter (where day >= '2018-02-01')::int as kept
        from (select day from public.analytics_distinct_days where website_id = ${site.id}
              union all select day from public.analytics_session_days where website_id = ${site.id}) as member_days`;
    expect(left).toEqual({ old: 0, kept: 3 });
    await sql`delete from public.websites where id = ${site.id}`;
  });
});

describe('a retention batch', () => {
  // A database of its own: the table holds only these rows, older first, as time writes them.
  const database = usePrivateDatabase('retention');

  // Counted, not timed. Naming the batch's rows by id had the delete find them
  // with a sequential scan of the whole table, in every batch.
  it('reads its own rows of the table, not every row, while the rows it deletes fill whole batches', async () => {
    const db = database.sql;
    const [site] = await db<{ id: string }[]>`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('Retention reads', 'retention.example', sha256('retention reads'), 'wsk_retentio')
      returning id`;
    const insertDays = (from: string, count: number) => db`
      insert into public.analytics_events (id, website_id, event_type, page, user_agent, device_type, session_id, visitor_id, created_at)
      select gen_random_uuid(), ${site.id}, 'page_view', '/p' || (g % 20), 'fixture', 'desktop', 's' || (g % 300), 'v' || (g % 500),
             ${from}::timestamptz + g * interval '1 minute'
        from generate_series(1, ${count}) g`;
    await insertDays('2018-01-01', 4_000);
    await insertDays('2025-01-01', 4_000);
    const batchSize = 500;
    const batches: { deleted: number; seqRows: number; indexEntries: number }[] = [];
    for (;;) {
      const { result: deleted, reads } = await db.begin((tx) =>
        readsDuring(tx, ['analytics_events'], async () => {
          const [row] = await tx<{ deleted: number }[]>`select public.delete_analytics_events_before('2019-01-01', ${batchSize}) as deleted`;
          return row.deleted;
        }),
      );
      batches.push({ deleted, seqRows: reads[0].seqRows, indexEntries: reads[0].indexEntries });
      if (deleted < batchSize) break;
    }
    expect(batches.map((batch) => batch.deleted)).toEqual([...Array(8).fill(batchSize), 0]);
    // A full batch reads its 500 rows; only the last call, which finds no row left, looks through the rest.
    for (const batch of batches.slice(0, -1)) expect(batch.seqRows + batch.indexEntries, JSON.stringify(batches)).toBeLessThanOrEqual(batchSize);
    const [left] = await db<{ old: number; recent: number }[]>`
      select count(*) filter (where created_at < '2019-01-01')::int as old, count(*) filter (where created_at >= '2019-01-01')::int as recent
        from public.analytics_events`;
    expect(left).toEqual({ old: 0, recent: 4_000 });
  });
});
