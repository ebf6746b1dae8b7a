import type { Tx } from '../../plugins/db.ts';

// Live view: visitors active in the last minutes, straight from the events (a
// few minutes of rows, found through the (website_id, created_at) index). Runs
// in the caller's transaction (`readAtOnceAsActor`), so row-level security
// decides which websites and events the caller sees. Bounded above by now():
// the API stamps events with now(), so a later one came from a restore, a row
// written by hand or a database clock stepped back, and would count as active
// until its date came (the same range on the index, so no dearer).

export interface ActiveWebsite {
  websiteId: string;
  name: string;
  activeVisitors: number;
}

/** Per website (or the one asked for), distinct visitors with an event in the last `seconds`, none dated later than now; busiest first. */
export async function getActiveVisitors(tx: Tx, { seconds, websiteId, limit }: { seconds: number; websiteId: string | null; limit: number }) {
  const rows = await tx<{ website_id: string; name: string; visitors: string }[]>`
    select w.id as website_id, w.name, active.visitors
      from public.websites w
     cross join lateral (
       select count(distinct e.visitor_id) as visitors
         from public.analytics_events e
        where e.website_id = w.id
          and e.created_at >= now() - make_interval(secs => ${seconds}) and e.created_at <= now()
     ) as active
     where w.deletion_started_at is null and (${websiteId}::uuid is null or w.id = ${websiteId}::uuid)
     order by active.visitors desc, w.name, w.id
     limit ${limit}`;
  return rows.map((row): ActiveWebsite => ({ websiteId: row.website_id, name: row.name, activeVisitors: Number(row.visitors) }));
}
