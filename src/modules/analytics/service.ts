import type { CsvSink } from '../../lib/csv.ts';
import { forbidden, notFound } from '../../lib/errors.ts';
import type { Database, DbActor, Tx } from '../../plugins/db.ts';
import { readCampaign } from './campaign.ts';
import { getDailyTopCountries, getTopDimensionValues } from './dimension-queries.ts';
import { createVisitorIds, describeUserAgent, referrerHost } from './enrich.ts';
import { getActiveVisitors } from './live-queries.ts';
import type { CountryLookup } from './geo.ts';
import type { AnalyticsBatcher } from './batcher.ts';
import { uuidv7 } from './ids.ts';
import { type AnalyticsReader, canViewWebsiteAnalytics, readerActor } from './permissions.ts';
import {
  getDailySeries,
  selectDailySeries,
  toDailySeriesDay,
  getDailyTotals,
  getDeviceSessionCounts,
  getSessionTotals,
  getTopPages,
  getTopReferrers,
  getUniqueVisitorCount,
  websiteExists,
} from './queries.ts';
import type { AnalyticsSummary, DailySeries, DayRange, LiveVisitors, RecordEventBody } from './schemas.ts';

const TOP_LIMIT = 10;
const EXPORT_CURSOR_ROWS = 100;
export const DAILY_SERIES_CSV_COLUMNS = ['date', 'pageViews', 'uniqueVisitors', 'sessions'] as const;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const websiteNotFound = () => notFound('Website not found');

const round = (value: number, decimals: number) => Math.round(value * 10 ** decimals) / 10 ** decimals;

export type RecordResult = { kind: 'bot' } | { kind: 'stored'; id: string; timestamp: string };

export function createIngestService({
  batcher,
  saltSecret,
  countryOf,
}: {
  batcher: AnalyticsBatcher;
  saltSecret: string;
  /** Country of a client IP; the IP goes no further than this call and the visitor hash. */
  countryOf: CountryLookup;
}) {
  const visitorId = createVisitorIds(saltSecret);

  return {
    /** Stores one event through the group commit; resolves once it is committed. */
    async record(body: RecordEventBody, client: { ip: string }): Promise<RecordResult> {
      const agent = describeUserAgent(body.userAgent);
      if (agent.bot) return { kind: 'bot' };
      if (!UUID.test(body.websiteId)) throw websiteNotFound();
      const at = new Date();
      const id = uuidv7(at.getTime());
      const { page, campaign } = readCampaign(body.page);
      const outcome = await batcher.record({
        id,
        websiteId: body.websiteId,
        eventType: body.eventType,
        page,
        referrer: body.referrer || null,
        referrerHost: referrerHost(body.referrer),
        userAgent: body.userAgent,
        deviceType: agent.device,
        sessionId: body.sessionId,
        userId: body.userId ?? null,
        visitorId: visitorId({ userId: body.userId, websiteId: body.websiteId, ip: client.ip, userAgent: body.userAgent, at }),
        country: countryOf(client.ip),
        ...campaign,
        metadata: body.metadata ?? {},
        createdAt: at,
      });
      if (outcome === 'unknown-website') throw websiteNotFound();
      return { kind: 'stored', id, timestamp: at.toISOString() };
    },
  };
}

export function createSummaryService({ db }: { db: Database }) {
  /** Runs `work` for `reader` after checking it may see the website and that the website exists. */
  async function forWebsite<T>(reader: AnalyticsReader, range: DayRange, work: (tx: Tx) => Promise<T>): Promise<T> {
    if (!canViewWebsiteAnalytics(reader, range.websiteId)) throw forbidden();
    return db.asActor(readerActor(reader), async (tx) => {
      // Issued together: postgres.js pipelines them on the transaction's connection.
      const [exists, result] = await Promise.all([websiteExists(tx, range.websiteId), work(tx)]);
      if (!exists) throw websiteNotFound();
      return result;
    });
  }

  return {
    summary(reader: AnalyticsReader, range: DayRange): Promise<AnalyticsSummary> {
      return forWebsite(reader, range, async (tx) => {
        const [totals, uniqueVisitors, sessions, topPages, referrers, devices, countries, utmSource, utmMedium, utmCampaign] =
          await Promise.all([
            getDailyTotals(tx, range),
            getUniqueVisitorCount(tx, range),
            getSessionTotals(tx, range),
            getTopPages(tx, range, TOP_LIMIT),
            getTopReferrers(tx, range, TOP_LIMIT),
            getDeviceSessionCounts(tx, range),
            getTopDimensionValues(tx, range, 'country', TOP_LIMIT),
            getTopDimensionValues(tx, range, 'utm_source', TOP_LIMIT),
            getTopDimensionValues(tx, range, 'utm_medium', TOP_LIMIT),
            getTopDimensionValues(tx, range, 'utm_campaign', TOP_LIMIT),
          ]);
        return {
          pageViews: totals.pageViews,
          uniqueVisitors,
          sessions: sessions.sessions,
          avgSessionDuration: sessions.sessions === 0 ? 0 : Math.round(sessions.durationMs / sessions.sessions / 1000),
          bounceRate: sessions.sessions === 0 ? 0 : round(sessions.bounces / sessions.sessions, 4),
          topPages,
          referrers,
          devices,
          avgLoadTime: totals.loadTimeCount === 0 ? null : round(totals.loadTimeSum / totals.loadTimeCount, 2),
          countries: countries.map(({ value, visitors }) => ({ country: value, visitors })),
          campaigns: { utmSource, utmMedium, utmCampaign },
        };
      });
    },

    /** Refuses (403, 404) before anything is sent; exports call it before their first byte. */
    checkReadable(reader: AnalyticsReader, range: DayRange): Promise<void> {
      return forWebsite(reader, range, async () => undefined);
    },

    /** The daily series into `sink`, read through a cursor; call checkReadable first. */
    async exportDailySeries(reader: AnalyticsReader, range: DayRange, sink: CsvSink): Promise<void> {
      await db.asActor(readerActor(reader), async (tx) => {
        for await (const rows of selectDailySeries(tx, range).cursor(EXPORT_CURSOR_ROWS)) {
          for (const row of rows) {
            const day = toDailySeriesDay(row);
            if (!(await sink.write(DAILY_SERIES_CSV_COLUMNS.map((column) => day[column])))) return;
          }
        }
      });
    },

    dailySeries(reader: AnalyticsReader, range: DayRange): Promise<DailySeries> {
      return forWebsite(reader, range, async (tx) => {
        const [days, countries] = await Promise.all([getDailySeries(tx, range), getDailyTopCountries(tx, range, TOP_LIMIT)]);
        return {
          startDate: range.startDate,
          endDate: range.endDate,
          days: days.map((day) => ({ ...day, countries: countries.get(day.date) ?? [] })),
        };
      });
    },
  };
}

/** Visitors count as active for this long after their last event. */
export const LIVE_WINDOW_SECONDS = 300;
const LIVE_MAX_WEBSITES = 100;

export function createLiveService({ db }: { db: Database }) {
  async function activeAs(actor: DbActor, websiteId: string | null): Promise<LiveVisitors> {
    const websites = await db.asActor(actor, (tx) =>
      getActiveVisitors(tx, { seconds: LIVE_WINDOW_SECONDS, websiteId, limit: LIVE_MAX_WEBSITES }),
    );
    return {
      windowSeconds: LIVE_WINDOW_SECONDS,
      at: new Date().toISOString(),
      activeVisitors: websites.reduce((sum, website) => sum + website.activeVisitors, 0),
      websites,
    };
  }

  return {
    /** A key reads its own website only; role holders every website, or the one asked for. */
    async activeVisitors(reader: AnalyticsReader, websiteId: string | undefined): Promise<LiveVisitors> {
      const target = websiteId ?? (reader.kind === 'api-key' ? reader.websiteId : null);
      if (target !== null && !canViewWebsiteAnalytics(reader, target)) throw forbidden();
      const live = await activeAs(readerActor(reader), target);
      if (target !== null && live.websites.length === 0) throw websiteNotFound();
      return live;
    },
    /** For the admin dashboard, as its caller. */
    activeAs,
  };
}
