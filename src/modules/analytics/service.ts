import { forbidden, notFound } from '../../lib/errors.ts';
import type { Database, Tx } from '../../plugins/db.ts';
import { createVisitorIds, describeUserAgent, referrerHost } from './enrich.ts';
import type { AnalyticsBatcher } from './batcher.ts';
import { uuidv7 } from './ids.ts';
import { type AnalyticsReader, canViewWebsiteAnalytics, readerActor } from './permissions.ts';
import {
  getDailySeries,
  getDailyTotals,
  getDeviceSessionCounts,
  getRecentActivity,
  getSessionTotals,
  getTopPages,
  getTopReferrers,
  getUniqueVisitorCount,
  websiteExists,
} from './queries.ts';
import type { AnalyticsSummary, DailySeries, DayRange, RecordEventBody } from './schemas.ts';

const TOP_LIMIT = 10;
/** What "right now" means for the live count: Umami and Plausible use five minutes too. */
export const REALTIME_WINDOW_MINUTES = 5;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const websiteNotFound = () => notFound('Website not found');

const round = (value: number, decimals: number) => Math.round(value * 10 ** decimals) / 10 ** decimals;

export type RecordResult = { kind: 'bot' } | { kind: 'stored'; id: string; timestamp: string };

export function createIngestService({ batcher, saltSecret }: { batcher: AnalyticsBatcher; saltSecret: string }) {
  const visitorId = createVisitorIds(saltSecret);

  return {
    /** Stores one event through the group commit; resolves once it is committed. */
    async record(body: RecordEventBody, client: { ip: string }): Promise<RecordResult> {
      const agent = describeUserAgent(body.userAgent);
      if (agent.bot) return { kind: 'bot' };
      if (!UUID.test(body.websiteId)) throw websiteNotFound();
      const at = new Date();
      const id = uuidv7(at.getTime());
      const outcome = await batcher.record({
        id,
        websiteId: body.websiteId,
        eventType: body.eventType,
        page: body.page,
        referrer: body.referrer || null,
        referrerHost: referrerHost(body.referrer),
        userAgent: body.userAgent,
        deviceType: agent.device,
        sessionId: body.sessionId,
        userId: body.userId ?? null,
        visitorId: visitorId({ userId: body.userId, websiteId: body.websiteId, ip: client.ip, userAgent: body.userAgent, at }),
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
  async function forWebsite<T>(reader: AnalyticsReader, websiteId: string, work: (tx: Tx) => Promise<T>): Promise<T> {
    if (!canViewWebsiteAnalytics(reader, websiteId)) throw forbidden();
    return db.asActor(readerActor(reader), async (tx) => {
      // Issued together: postgres.js pipelines them on the transaction's connection.
      const [exists, result] = await Promise.all([websiteExists(tx, websiteId), work(tx)]);
      if (!exists) throw websiteNotFound();
      return result;
    });
  }

  return {
    summary(reader: AnalyticsReader, range: DayRange): Promise<AnalyticsSummary> {
      return forWebsite(reader, range.websiteId, async (tx) => {
        const [totals, uniqueVisitors, sessions, topPages, referrers, devices] = await Promise.all([
          getDailyTotals(tx, range),
          getUniqueVisitorCount(tx, range),
          getSessionTotals(tx, range),
          getTopPages(tx, range, TOP_LIMIT),
          getTopReferrers(tx, range, TOP_LIMIT),
          getDeviceSessionCounts(tx, range),
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
        };
      });
    },

    /** Visitors (distinct visitor ids) and page views of the last REALTIME_WINDOW_MINUTES. */
    realtime(reader: AnalyticsReader, websiteId: string) {
      return forWebsite(reader, websiteId, (tx) => getRecentActivity(tx, websiteId, REALTIME_WINDOW_MINUTES));
    },

    dailySeries(reader: AnalyticsReader, range: DayRange): Promise<DailySeries> {
      return forWebsite(reader, range.websiteId, async (tx) => ({
        startDate: range.startDate,
        endDate: range.endDate,
        days: await getDailySeries(tx, range),
      }));
    },
  };
}
