import { z } from 'zod';
import { boundedJsonObject, isStorableText, requiredString, uuidInput } from '../../lib/schemas.ts';
import { addDays, daysInRange, FIRST_DAY, isCalendarDay, isDayInRange, isWithinAYear, LAST_DAY, utcDay } from './dates.ts';

// Request and response shapes of the analytics routes (SPEC sections 2 and 4).
// Every input is bounded; dates are whole UTC days.

export const EVENT_TYPES = ['page_view', 'click', 'form_submit', 'custom'] as const;
export const METADATA_MAX_BYTES = 4096;
export const DEFAULT_RANGE_DAYS = 30;
/** An hour, in milliseconds: the longest metadata.loadTime counted in avgLoadTime. */
export const LOAD_TIME_MAX_MS = 3_600_000;

const text = (label: string, max: number) =>
  requiredString(label)
    .min(1, `${label} is required`)
    .max(max, `${label} must be at most ${max} characters`)
    .refine(isStorableText, `${label} must not contain NUL characters or unpaired surrogates`);

// metadata.loadTime is summed into a day's avgLoadTime, and events are never
// deleted: one huge value (1e307 overflows the sum) or a negative one would
// blank or skew that day for good. A loadTime that is not a number is stored
// but not counted, as before.
const hasCountableLoadTime = (metadata: Record<string, unknown>) =>
  typeof metadata.loadTime !== 'number' || (Number.isFinite(metadata.loadTime) && metadata.loadTime >= 0 && metadata.loadTime <= LOAD_TIME_MAX_MS);

/**
 * A page is a key of the daily pages rollup, and a btree key holds at most
 * 2,704 bytes: 2,048 characters of CJK text (6 KB) failed the insert of its
 * whole batch. Bounded in UTF-8 bytes, then; a browser's `location.pathname`
 * is percent-encoded ASCII, so for a tracker that is 2,048 characters still.
 */
export const PAGE_MAX_BYTES = 2048;
const page = requiredString('Page')
  .min(1, 'Page is required')
  .refine((value) => Buffer.byteLength(value) <= PAGE_MAX_BYTES, `Page must be at most ${PAGE_MAX_BYTES} bytes as UTF-8`)
  .refine(isStorableText, 'Page must not contain NUL characters or unpaired surrogates')
  // JSON Schema counts characters; 2,048 bytes are at most 2,048 of them.
  .meta({ maxLength: PAGE_MAX_BYTES, description: `The page's path; utm_* tags in its query string are read as the campaign and taken out of it; at most ${PAGE_MAX_BYTES} bytes as UTF-8` });

export const RecordEventBodySchema = z.object({
  // Any string: an id that is not one of our websites is simply not found (404).
  websiteId: text('Website id', 64),
  eventType: z.enum(EVENT_TYPES, { error: `Event type must be one of: ${EVENT_TYPES.join(', ')}` }),
  page,
  // The optional fields take null as "not given": front ends send `document.referrer || null`.
  referrer: z
    .string({ error: 'Referrer must be a string' })
    .max(2048, 'Referrer must be at most 2048 characters')
    .refine(isStorableText, 'Referrer must not contain NUL characters or unpaired surrogates')
    .nullish(),
  userAgent: text('User agent', 1024),
  sessionId: text('Session id', 128),
  userId: text('User id', 128).nullish(),
  // Not in SPEC's entry, and optional: Safari on an iPad sends a Mac's user
  // agent, and only the browser knows it has a touch screen. Read with a
  // Macintosh user agent only (enrich.ts); not stored as such.
  touchScreen: z
    .boolean({ error: 'Touch screen must be true or false' })
    .meta({
      description:
        'true when the browser reports a touch screen (navigator.maxTouchPoints > 1). Read only with a Macintosh user agent, ' +
        'which Safari on iPadOS 13+ sends: the event counts as a tablet. The tracker sends it only then.',
    })
    .nullish(),
  metadata: boundedJsonObject('Metadata', METADATA_MAX_BYTES)
    .refine(hasCountableLoadTime, `loadTime must be a number of milliseconds from 0 to ${LOAD_TIME_MAX_MS}`)
    .meta({
      description: `At most ${METADATA_MAX_BYTES} bytes as JSON; keys at most 100 characters; a numeric loadTime is milliseconds from 0 to ${LOAD_TIME_MAX_MS}`,
    })
    .nullish(),
});
export type RecordEventBody = z.infer<typeof RecordEventBodySchema>;

export const RecordedEventResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({ id: z.uuid(), timestamp: z.iso.datetime() }),
});

export const IgnoredEventResponseSchema = z.object({ success: z.literal(true), message: z.string() });

const day = (label: string, description: string) =>
  z
    // A parameter given twice arrives as an array: one message for every value that is not a day.
    .string({ error: `${label} must be a date written YYYY-MM-DD` })
    .refine(isCalendarDay, { error: `${label} must be a date written YYYY-MM-DD`, abort: true })
    .refine(isDayInRange, `${label} must be from ${FIRST_DAY} to ${LAST_DAY}`)
    // The refines have no JSON Schema form: the document says it in words.
    .meta({ format: 'date', description: `${description}; from ${FIRST_DAY} to ${LAST_DAY}, a range at most a year` })
    .optional();
const startDate = day('Start date', `First UTC day, YYYY-MM-DD. Default: the ${DEFAULT_RANGE_DAYS} days up to endDate`);
const endDate = day('End date', 'Last UTC day, YYYY-MM-DD. Default: today (UTC), or startDate when that is later');

/**
 * Fills in the default range: the last 30 days up to today (UTC), or 30 days
 * up to endDate. A startDate alone runs to today, or to itself when it is
 * after today: a caller east of UTC asking for its own today is a day ahead.
 * The default start is never before FIRST_DAY: an endDate in January 1970
 * would otherwise echo a start the caller could not have sent (400).
 */
function resolveRange<Q extends { startDate?: string; endDate?: string }>(query: Q) {
  const today = utcDay(new Date());
  const endDate = query.endDate ?? (query.startDate !== undefined && query.startDate > today ? query.startDate : today);
  const defaultStart = addDays(endDate, -(DEFAULT_RANGE_DAYS - 1));
  // YYYY-MM-DD strings sort as the days do.
  const startDate = query.startDate ?? (defaultStart < FIRST_DAY ? FIRST_DAY : defaultStart);
  return { ...query, startDate, endDate };
}

/**
 * Start not after end, and a year at most: a range from a day to the same day
 * a year later is allowed, 29 February or not. Checked on the query as given,
 * so that a range too long is said of the date the caller sent: of startDate
 * when endDate was left to default to today.
 */
function checkRange(query: { startDate?: string; endDate?: string }, context: z.RefinementCtx) {
  const { startDate, endDate } = resolveRange(query);
  // A day outside the days a range may name has its own issue; the range it
  // would make (a start clamped to FIRST_DAY after an end before it) is no second one.
  if (!isDayInRange(startDate) || !isDayInRange(endDate)) return;
  if (daysInRange(startDate, endDate) < 1) context.addIssue({ code: 'custom', path: ['startDate'], message: 'Start date must not be after end date' });
  else if (!isWithinAYear(startDate, endDate)) {
    context.addIssue({ code: 'custom', path: [query.endDate === undefined ? 'startDate' : 'endDate'], message: 'Date range must be at most one year' });
  }
}

const websiteId = uuidInput('Website id');

export const SummaryQuerySchema = z
  .object({ websiteId, startDate, endDate })
  .superRefine(checkRange)
  .transform(resolveRange);
export const DateRangeQuerySchema = SummaryQuerySchema;
export const WebsiteSummaryParamsSchema = z.object({ websiteId });
export const WebsiteSummaryQuerySchema = z
  .object({ startDate, endDate })
  .superRefine(checkRange)
  .transform(resolveRange);

export interface DayRange {
  websiteId: string;
  startDate: string;
  endDate: string;
}

const count = z.number().int().nonnegative();

/** Unique visitors from one country (ISO 3166-1 alpha-2). */
export const CountryCountSchema = z.object({ country: z.string().length(2), visitors: count });
/** Unique visitors who arrived with one value of a utm_* tag. */
export const TagCountSchema = z.object({ value: z.string(), visitors: count });

export const AnalyticsSummarySchema = z.object({
  pageViews: count,
  uniqueVisitors: count,
  sessions: count,
  avgSessionDuration: count,
  bounceRate: z.number().min(0).max(1),
  topPages: z.array(z.object({ page: z.string(), views: count })),
  referrers: z.array(z.object({ source: z.string(), count })),
  devices: z.array(z.object({ type: z.enum(['desktop', 'mobile', 'tablet']), count })),
  avgLoadTime: z.number().nullable(),
  countries: z.array(CountryCountSchema),
  campaigns: z.object({
    utmSource: z.array(TagCountSchema),
    utmMedium: z.array(TagCountSchema),
    utmCampaign: z.array(TagCountSchema),
  }),
});
export type AnalyticsSummary = z.infer<typeof AnalyticsSummarySchema>;

export const SummaryResponseSchema = z.object({
  success: z.literal(true),
  data: AnalyticsSummarySchema.extend({ websiteId: z.uuid(), startDate: z.string(), endDate: z.string() }),
});

export const DailySeriesSchema = z.object({
  startDate: z.string(),
  endDate: z.string(),
  days: z.array(
    z.object({ date: z.string(), pageViews: count, uniqueVisitors: count, sessions: count, countries: z.array(CountryCountSchema) }),
  ),
});
export type DailySeries = z.infer<typeof DailySeriesSchema>;

export const DailySeriesResponseSchema = z.object({ success: z.literal(true), data: DailySeriesSchema.extend({ websiteId: z.uuid() }) });

export const LiveQuerySchema = z.object({ websiteId: websiteId.optional() });

export const LiveVisitorsSchema = z.object({
  windowSeconds: count,
  at: z.iso.datetime(),
  activeVisitors: count,
  websites: z.array(z.object({ websiteId: z.uuid(), name: z.string(), activeVisitors: count })),
});
export type LiveVisitors = z.infer<typeof LiveVisitorsSchema>;

export const LiveVisitorsResponseSchema = z.object({ success: z.literal(true), data: LiveVisitorsSchema });

export const CsvResponseSchema = z.string().describe('text/csv; a header line, then one line per row');
