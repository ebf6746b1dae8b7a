import type { FastifyBaseLogger } from 'fastify';
import { ConfigError } from '../config.ts';
import type { Database } from './db.ts';
import { checkLogin } from './db-login.ts';
import { warnIfSchemaMismatched } from './db-schema.ts';

// What the start judges of the database, once the app is ready: its login
// (db-login.ts) and whether its schema is behind or ahead of the code (db-schema.ts).

/** Per database, when the start's judgement of it is done (judgementOf). */
const judgements = new WeakMap<Database, Promise<void>>();

/**
 * Settles once the start has judged `db`: its login accepted and its schema
 * checked, or the database found silent (it is judged when it answers), so
 * that what the start found is in the log. Never settles for a login the
 * start refused: the start ends. Settled at once for a database the start did
 * not judge. The stored log waits on it (modules/logs/worker.ts): a refused
 * login or an unmigrated database showed first as a failure to store log
 * entries, ahead of the line that says why.
 */
export function judgementOf(db: Database): Promise<void> {
  return judgements.get(db) ?? Promise.resolve();
}

export interface DatabaseStartOptions {
  /** Production refuses a login that is too strong; elsewhere (a developer's own database) it is a warning. */
  production: boolean;
  log: FastifyBaseLogger;
  /** The app's close: the database is asked no more. */
  signal: AbortSignal;
  /** Called with a problem found after the start that the start would have refused (server.ts exits); without it, the problem is logged. */
  onFatal?: (error: Error) => void;
}

/**
 * Judges DATABASE_URL's login and then the schema. Rejects with the
 * ConfigError that ends the start; a database silent at the start is judged
 * when it first answers, and what is found then goes to `onFatal`.
 */
export async function judgeDatabaseAtStart(db: Database, { production, log, signal, onFatal }: DatabaseStartOptions): Promise<void> {
  let judged!: () => void;
  judgements.set(db, new Promise((resolve) => (judged = resolve)));
  const refusal = (problem: string): ConfigError | undefined => {
    if (production) return new ConfigError(`Invalid configuration: ${problem}`);
    log.warn(problem);
    return undefined;
  };
  const late = (problem: string) => {
    const error = refusal(problem);
    if (!error) return;
    // Found after the start, when the database first answered: every
    // request from now on would run under that login, so the process
    // stops as that start would have (server.ts's onFatal).
    if (onFatal) onFatal(error);
    else log.error(error.message);
  };
  let silentAtStart = false;
  const problem = await checkLogin(db, {
    signal,
    late,
    // The start goes on without it; without this line the first sign of trouble was a failed request.
    silent: (error) => {
      silentAtStart = true;
      log.warn({ err: error }, 'the database does not answer at the start: requests that need it get 503 until it does; its login is judged when it answers');
    },
    answered: () => {
      log.info('the database answers');
      void warnIfSchemaMismatched(db, log);
    },
  });
  const error = problem === undefined ? undefined : refusal(problem);
  if (error) throw error;
  // Not awaited: the start does not wait on it. A database silent now is asked when it answers.
  if (silentAtStart) judged();
  else void warnIfSchemaMismatched(db, log).then(judged);
}
