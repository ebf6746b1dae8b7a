import { hashApiKey, isWellFormedApiKey } from '../../lib/api-keys.ts';
import type { CsvSink } from '../../lib/csv.ts';
import { forbidden, notFound } from '../../lib/errors.ts';
import type { Database, Tx } from '../../plugins/db.ts';
import { getDailyTopCountries, getTopDimensionValues } from './dimension-queries.ts';
import { getActiveVisitors } from './live-queries.ts';
import { type AnalyticsCaller, analyticsDbActorOf, canViewWebsiteAnalytics } from './permissions.ts';
import {
  getDailySeries,
  getDailyTotals,
  getDistinctCounts,
  getSessionTotals,
  getTopPages,
  getTopReferrers,
  selectDailySeries,
  toDailySeriesDay,
} from './queries.ts';
import type { AnalyticsSummary, DailySeries, DayRange, LiveVisitors } from './schemas.ts';
import { selectWebsiteIdByApiKeyHashElevated, websiteExists } from './website-queries.ts';

// Reading analytics: summaries and daily series of one website over whole
// days, their CSV export, and the live count of active visitors. Every read
// runs as the caller's database actor (analyticsDbActorOf).

const TOP_LIMIT = 10;
const EXPORT_CURSOR_ROWS = 100;
export const DAILY_SERIES_CSV_COLUMNS = ['date', 'pageViews', 'uniqueVisitors', 'sessions'] as const;

export const websiteNotFound = () => notFound('Website not found');

const round = (value: number, decimals: number) => Math.round(value * 10 ** decimals) / 10 ** decimals;

/** Visitors count as active for this long after their last event. */
export const LIVE_WINDOW_SECONDS = 300;
const LIVE_MAX_WEBSITES = 100;

export function createAnalyticsService({ db }: { db: Database }) {
  /** Runs `work` for `caller` after checking it may see the website and that the website exists. */
  async function forWebsite<T>(caller: AnalyticsCaller, range: DayRange, work: (tx: Tx) => Promise<T>): Promise<T> {
    if (!canViewWebsiteAnalytics(caller, range.websiteId)) throw forbidden();
    return db.readAtOnceAsActor(analyticsDbActorOf(caller), async (tx) => {
      // Issued together, so they go out with the actor's settings in one round trip.
      const [exists, result] = await Promise.all([websiteExists(tx, range.websiteId), work(tx)]);
      if (!exists) throw websiteNotFound();
      return result;
    });
  }

  /** Elevated: the website an API key opens, or undefined; the key itself is the credential. */
  async function websiteIdOfApiKeyElevated(apiKey: string): Promise<string | undefined> {
    if (!isWellFormedApiKey(apiKey)) return undefined;
    const [row] = await db.bounded(selectWebsiteIdByApiKeyHashElevated(db.sql, hashApiKey(apiKey)));
    return row?.id;
  }

  function summary(caller: AnalyticsCaller, range: DayRange): Promise<AnalyticsSummary> {
    return forWebsite(caller, range, async (tx) => {
      const [totals, distinct, sessions, topPages, referrers, dimensions] = await Promise.all([
        getDailyTotals(tx, range),
        getDistinctCounts(tx, range),
        getSessionTotals(tx, range),
        getTopPages(tx, range, TOP_LIMIT),
        getTopReferrers(tx, range, TOP_LIMIT),
        getTopDimensionValues(tx, range, TOP_LIMIT),
      ]);
      return {
        pageViews: totals.pageViews,
        uniqueVisitors: distinct.visitors,
        sessions: sessions.sessions,
        avgSessionDuration: sessions.sessions === 0 ? 0 : Math.round(sessions.durationMs / sessions.sessions / 1000),
        bounceRate: sessions.sessions === 0 ? 0 : round(sessions.bounces / sessions.sessions, 4),
        topPages,
        referrers,
        devices: distinct.devices,
        avgLoadTime: totals.loadTimeCount === 0 ? null : round(totals.loadTimeSum / totals.loadTimeCount, 2),
        countries: dimensions.country.map(({ value, visitors }) => ({ country: value, visitors })),
        campaigns: { utmSource: dimensions.utm_source, utmMedium: dimensions.utm_medium, utmCampaign: dimensions.utm_campaign },
      };
    });
  }

  /** Refuses (403, 404) before anything is sent; exports call it before their first byte. */
  function checkReadable(caller: AnalyticsCaller, range: DayRange): Promise<void> {
    return forWebsite(caller, range, async () => undefined);
  }

  /** The daily series into `sink`, read through a cursor; call checkReadable first. */
  async function exportDailySeries(caller: AnalyticsCaller, range: DayRange, sink: CsvSink): Promise<void> {
    await db.asActor(analyticsDbActorOf(caller), async (tx) => {
      for await (const rows of selectDailySeries(tx, range).cursor(EXPORT_CURSOR_ROWS)) {
        for (const row of rows) {
          const day = toDailySeriesDay(row);
          if (!(await sink.write(DAILY_SERIES_CSV_COLUMNS.map((column) => day[column])))) return;
        }
      }
    });
  }

  function dailySeries(caller: AnalyticsCaller, range: DayRange): Promise<DailySeries> {
    return forWebsite(caller, range, async (tx) => {
      const [days, countries] = await Promise.all([getDailySeries(tx, range), getDailyTopCountries(tx, range, TOP_LIMIT)]);
      return {
        startDate: range.startDate,
        endDate: range.endDate,
        days: days.map((day) => ({ ...day, countries: countries.get(day.date) ?? [] })),
      };
    });
  }

  /** A key reads its own website only; role holders every website (the dashboard's view), or the one asked for. */
  async function activeVisitors(caller: AnalyticsCaller, websiteId: string | undefined): Promise<LiveVisitors> {
    const target = websiteId ?? (caller.kind === 'api-key' ? caller.websiteId : null);
    if (target !== null && !canViewWebsiteAnalytics(caller, target)) throw forbidden();
    const websites = await db.readAtOnceAsActor(analyticsDbActorOf(caller), (tx) =>
      getActiveVisitors(tx, { seconds: LIVE_WINDOW_SECONDS, websiteId: target, limit: LIVE_MAX_WEBSITES }),
    );
    if (target !== null && websites.length === 0) throw websiteNotFound();
    return {
      windowSeconds: LIVE_WINDOW_SECONDS,
      at: new Date().toISOString(),
      activeVisitors: websites.reduce((sum, website) => sum + website.activeVisitors, 0),
      websites,
    };
  }

  return { websiteIdOfApiKeyElevated, summary, checkReadable, exportDailySeries, dailySeries, activeVisitors };
}

export type AnalyticsService = ReturnType<typeof createAnalyticsService>;
