// Calendar days (YYYY-MM-DD, UTC) for analytics ranges.

const DAY_MS = 86_400_000;
const DAY_PATTERN = /^(\d{4})-(\d{2})-(\d{2})$/;

/** Is `value` a real calendar day written YYYY-MM-DD (no 2026-02-30)? */
export function isCalendarDay(value: string): boolean {
  const match = DAY_PATTERN.exec(value);
  if (!match) return false;
  const [, year, month, day] = match.map(Number);
  const date = new Date(Date.UTC(year, month - 1, day));
  return date.getUTCFullYear() === year && date.getUTCMonth() === month - 1 && date.getUTCDate() === day;
}

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

/** The same day a year later (29 February gives 1 March): a year's range is 366 or 367 days, both ends included. */
export function sameDayNextYear(day: string): string {
  const [year, month, date] = day.split('-').map(Number);
  return utcDay(new Date(Date.UTC(year + 1, month - 1, date)));
}
