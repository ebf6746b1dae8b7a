import { setTimeout as sleep } from 'node:timers/promises';
import { ConfigError } from '../config.ts';
import type { Database } from './db.ts';

// The data path must not log in as the schema's owner or a superuser: then
// nothing it ran, however crafted, could change the schema or switch RLS off.
// A database that is down or slow at the start must not let such a login
// through: it is judged on the first connection that answers, however late.
// A login the database refuses outright can never work, however long it is
// asked again: it ends the start like a bad setting.

/** How long the start waits for the first answer; a database slower than this is judged when it answers. */
const START_WAIT_MS = 2_000;
/** The pause between attempts while the database cannot be reached (the pool adds its own reconnect delay). */
const RETRY_MS = 500;

/**
 * SQLSTATEs of a login PostgreSQL refuses for good: a role that does not exist
 * or may not connect (28000), a wrong password (28P01), a database that does
 * not exist (3D000), a login not granted service_role, whose every connection
 * starts as it (42501).
 */
const REFUSED_LOGIN = new Set(['28000', '28P01', '3D000', '42501']);

/**
 * The line for a login the database refused for good, with the server's
 * reason (which never holds the password); undefined for any other failure (a
 * database down, starting up or slow), which is asked again.
 */
function refusedLogin(error: unknown): string | undefined {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code !== 'string' || !REFUSED_LOGIN.has(code)) return undefined;
  return `DATABASE_URL is refused by the database: ${String(message)} (SQLSTATE ${code})`;
}

/**
 * Why DATABASE_URL's login is too strong for the data path (a superuser, or
 * the owner of the schema), or undefined; rejects when the database could not
 * be asked.
 */
async function ownerOrSuperuserLogin(db: Database): Promise<string | undefined> {
  const [row] = await db.sql<{ login: string; superuser: boolean; owner: boolean }[]>`
    select session_user as login,
           coalesce((select rolsuper from pg_roles where rolname = session_user), false) as superuser,
           pg_has_role(session_user, (select nspowner from pg_namespace where nspname = 'public'), 'MEMBER') as owner`;
  if (!row || (!row.superuser && !row.owner)) return undefined;
  return (
    `DATABASE_URL connects as ${row.login}, ${row.superuser ? 'a superuser' : 'the owner of the schema'}; ` +
    'connect as a login role that can only switch to anon, authenticated and service_role (README, Least privilege)'
  );
}

/** `attempt`'s answer (a refusal of the login is one), else asked again every RETRY_MS until the database answers; undefined once `signal` aborts. */
async function firstAnswer(db: Database, attempt: Promise<string | undefined>, signal: AbortSignal): Promise<string | undefined> {
  let next = attempt;
  for (;;) {
    try {
      return await next;
    } catch (error) {
      const refused = refusedLogin(error);
      if (refused !== undefined) return refused;
      await sleep(RETRY_MS, undefined, { signal }).catch(() => {});
      // Asked no more once the app closes: its pool is ending.
      if (signal.aborted) return undefined;
      next = ownerOrSuperuserLogin(db);
    }
  }
}

export interface LoginCheckHooks {
  /** The app's close: the database is asked no more. */
  signal: AbortSignal;
  /** A problem found when a database silent at the start first answered. */
  late(problem: string): void;
  /** The database did not answer at the start (`error`: how its attempt failed, if it did). */
  silent(error: unknown): void;
  /** A database silent at the start answered, and its login is fine. */
  answered(): void;
}

/**
 * Judges DATABASE_URL's login. The start waits for the first attempt, at
 * most START_WAIT_MS, and gets its problem (or undefined); a login the
 * database refused throws a ConfigError in every environment, for nothing
 * could run. A database down or still silent by then does not hold the
 * start (/health reports it; `silent` says so in the log): the login is
 * judged on its first answer, and a problem found then (a refusal too) goes
 * to `late`, else `answered` is called, unless `signal` (the app's close)
 * came first.
 */
export async function checkLogin(db: Database, { signal, late, silent, answered }: LoginCheckHooks): Promise<string | undefined> {
  const attempt = ownerOrSuperuserLogin(db);
  attempt.catch(() => {});
  let failure: unknown;
  const atStart = await Promise.race([
    attempt.then(
      (problem) => ({ problem }),
      (error: unknown) => {
        const refused = refusedLogin(error);
        failure = error;
        return refused === undefined ? undefined : { refused };
      },
    ),
    sleep(START_WAIT_MS, undefined, { ref: false }),
  ]);
  if (atStart && 'refused' in atStart) throw new ConfigError(`Invalid configuration: ${atStart.refused}`);
  if (atStart) return atStart.problem;
  silent(failure);
  void firstAnswer(db, attempt, signal).then((problem) => {
    if (signal.aborted) return;
    if (problem) late(problem);
    else answered();
  });
  return undefined;
}
