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

// Units and what each count counts, in the document (docs/analytics.md, "Metric
// definitions"): the SPEC leaves avgSessionDuration's unit out, and `count`,
// `visitors` and `views` count different things.

/** Unique visitors from one country (ISO 3166-1 alpha-2). */
export const CountryCountSchema = z.object({
  country: z.string().length(2),
  visitors: count.describe('Distinct visitors with an event from this country; a visitor seen from two countries counts for both'),
});
/** Unique visitors who arrived with one value of a utm_* tag. */
export const TagCountSchema = z.object({ value: z.string(), visitors: count.describe('Distinct visitors with an event carrying this value') });

export const AnalyticsSummarySchema = z.object({
  pageViews: count.describe('`page_view` events'),
  uniqueVisitors: count.describe('Distinct visitors (a signed-in user once; an anonymous visitor once per UTC day)'),
  sessions: count.describe('Distinct `sessionId`s'),
  avgSessionDuration: count.describe('Seconds, rounded to a whole number: the mean over sessions of the time from their first event to their last in the range; a one-event session counts 0'),
  bounceRate: z
    .number()
    .min(0)
    .max(1)
    .describe('A fraction from 0 to 1 (not a percentage), to 4 decimals: sessions with exactly one event in the range, a `page_view`, over all sessions; 0 without sessions'),
  topPages: z
    .array(z.object({ page: z.string(), views: count.describe('`page_view` events of this page') }))
    .describe('At most 10, most views first'),
  referrers: z
    .array(
      z.object({
        source: z.string().describe("The referrer's host"),
        count: count.describe('Events of any type (a page view, a click) carrying this referrer, not visitors or sessions'),
      }),
    )
    .describe('At most 10, highest count first; events without a referrer are left out'),
  devices: z
    .array(z.object({ type: z.enum(['desktop', 'mobile', 'tablet']), count: count.describe('Distinct sessions seen on this device type') }))
    .describe('Types with no session are left out'),
  avgLoadTime: z
    .number()
    .nullable()
    .describe('Milliseconds, to 2 decimals: the mean of `metadata.loadTime` over the events that carry it as a number; null when none does'),
  countries: z.array(CountryCountSchema).describe('At most 10, most visitors first'),
  campaigns: z
    .object({
      utmSource: z.array(TagCountSchema),
      utmMedium: z.array(TagCountSchema),
      utmCampaign: z.array(TagCountSchema),
    })
    .describe('For each utm_* tag, at most 10 values, most visitors first'),
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
