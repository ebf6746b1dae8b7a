import type { Tx } from '../../plugins/db.ts';
import type { DayRange } from './schemas.ts';

// Countries and campaign tags, from analytics_daily_dimensions (migration
// 20261122000110): a visitor counts once in the range, on the first day it
// was seen there with that value (prev_day before the range). One query per
// function, in the caller's transaction (`readAtOnceAsActor`).

export type Dimension = 'country' | 'utm_source' | 'utm_medium' | 'utm_campaign';

export type TopDimensionValues = Record<Dimension, { value: string; visitors: number }[]>;

/**
 * For each dimension, the `limit` values with the most unique visitors in the
 * range; ties by value. One statement for the four (each statement of a
 * summary pays its own role lookup under row-level security).
 */
export async function getTopDimensionValues(tx: Tx, { websiteId, startDate, endDate }: DayRange, limit: number): Promise<TopDimensionValues> {
  const rows = await tx<{ dimension: Dimension; value: string; visitors: string }[]>`
    select dimension, value, visitors
      from (
        select dimension, value, sum(visitors) as visitors,
               row_number() over (partition by dimension order by sum(visitors) desc, value asc) as rank
          from public.analytics_daily_dimensions
         where website_id = ${websiteId} and dimension in ('country', 'utm_source', 'utm_medium', 'utm_campaign')
           and day between ${startDate}::date and ${endDate}::date and prev_day < ${startDate}::date
         group by dimension, value
        having sum(visitors) > 0
      ) as ranked
     where rank <= ${limit}
     order by dimension, rank`;
  const top: TopDimensionValues = { country: [], utm_source: [], utm_medium: [], utm_campaign: [] };
  for (const row of rows) top[row.dimension].push({ value: row.value, visitors: Number(row.visitors) });
  return top;
}

/** Per day of the range, its own top `limit` countries by that day's unique visitors; days without any are absent. */
export async function getDailyTopCountries(tx: Tx, { websiteId, startDate, endDate }: DayRange, limit: number) {
  const rows = await tx<{ date: string; value: string; visitors: string }[]>`
    select to_char(day, 'YYYY-MM-DD') as date, value, visitors
      from (
        select day, value, sum(visitors) as visitors,
               row_number() over (partition by day order by sum(visitors) desc, value asc) as rank
          from public.analytics_daily_dimensions
         where website_id = ${websiteId} and dimension = 'country'
           and day between ${startDate}::date and ${endDate}::date
         group by day, value
        having sum(visitors) > 0
      ) as ranked
     where rank <= ${limit}
     order by day, rank`;
  const byDay = new Map<string, { country: string; visitors: number }[]>();
  for (const row of rows) {
    const list = byDay.get(row.date) ?? [];
    list.push({ country: row.value, visitors: Number(row.visitors) });
    byDay.set(row.date, list);
  }
  return byDay;
}
