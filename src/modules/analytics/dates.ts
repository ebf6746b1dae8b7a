// Calendar days (YYYY-MM-DD, UTC) for analytics ranges.

const DAY_MS = 86_400_000;
const DAY_PATTERN = /^(\d{4})-(\d{2})-(\d{2})$/;

/**
 * The days a range may name. Events are stamped by the server's clock, so
 * none is older than 1970; past 9999 a day no longer has four digits, and
 * a range's default start, 29 days back, stays a day PostgreSQL takes (and
 * is never before FIRST_DAY: schemas.ts clamps it).
 */
export const FIRST_DAY = '1970-01-01';
export const LAST_DAY = '9999-12-31';

/** Is `value` a real calendar day written YYYY-MM-DD (no 2026-02-30)? */
export function isCalendarDay(value: string): boolean {
  const match = DAY_PATTERN.exec(value);
  if (!match) return false;
  const [, year, month, day] = match.map(Number);
  // Date.UTC would read years 0 to 99 as 1900 to 1999.
  const date = new Date(0);
  date.setUTCFullYear(year, month - 1, day);
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

/** A calendar day from FIRST_DAY to LAST_DAY (YYYY-MM-DD strings sort as the days do). */
export const isDayInRange = (day: string) => day >= FIRST_DAY && day <= LAST_DAY;

// Ingestion asks for the day of every event, nearly always today: the last
// answer is kept (toISOString cost 2.3 µs an event in bench:profile).
let lastDayNumber = Number.NaN;
let lastDay = '';

export function utcDay(date: Date): string {
  const dayNumber = Math.floor(date.getTime() / DAY_MS);
  if (dayNumber !== lastDayNumber) {
    // An invalid date throws here (RangeError), as before, and is never kept.
    lastDay = date.toISOString().slice(0, 10);
    lastDayNumber = dayNumber;
  }
  return lastDay;
}

export function addDays(day: string, days: number): string {
  return utcDay(new Date(Date.parse(`${day}T00:00:00Z`) + days * DAY_MS));
}

/** Days from `start` to `end`, both included (1 for the same day, 0 or less when start is after end). */
export function daysInRange(start: string, end: string): number {
  return Math.round((Date.parse(`${end}T00:00:00Z`) - Date.parse(`${start}T00:00:00Z`)) / DAY_MS) + 1;
}

/**
 * Is `end` at most the same day a year after `start` (29 February gives 1
 * March)? A year's range is 366 or 367 days, both ends included.
 */
export function isWithinAYear(start: string, end: string): boolean {
  const [year, month, date] = start.split('-').map(Number);
  // As a time, not a string: a year after 9999-12-31 is written +010000-12-31.
  return Date.parse(`${end}T00:00:00Z`) <= Date.UTC(year + 1, month - 1, date);
}
