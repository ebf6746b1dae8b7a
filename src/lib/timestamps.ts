// Timestamps as the API writes them (`Date#toISOString`: UTC, milliseconds),
// made from PostgreSQL's text for a timestamptz instead of through a Date. The
// driver turns every timestamptz into a Date by parsing that text, and the
// API turns it back into a string: about 40 µs for the 60 timestamps of one
// page of the feedback list, against 2–8 µs read straight from the text
// (docs/performance.md).

/** PostgreSQL's output for a timestamptz in UTC: date, time, up to 6 fraction digits, `+00`. */
const UTC_TIMESTAMP = /^(\d{4}-\d\d-\d\d) (\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?\+00$/;

/**
 * `text` (a timestamptz as PostgreSQL writes it, e.g. `2026-11-23 20:56:00.123456+00`)
 * as `toISOString` writes the same instant (`2026-11-23T20:56:00.123Z`):
 * the fraction truncated to milliseconds, as a Date keeps it. Text in
 * another zone, or any other shape, goes through Date.
 */
export function isoTimestamp(text: string): string {
  // The common case, six fraction digits, without a regular expression.
  if (text.length === 29 && text[10] === ' ' && text[19] === '.' && text.endsWith('+00')) return `${text.slice(0, 10)}T${text.slice(11, 23)}Z`;
  const utc = UTC_TIMESTAMP.exec(text);
  if (utc) return `${utc[1]}T${utc[2]}.${`${utc[3] ?? ''}000`.slice(0, 3)}Z`;
  return new Date(text).toISOString();
}
