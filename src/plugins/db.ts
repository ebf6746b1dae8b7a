import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type postgres from 'postgres';
import type { Config } from '../config.ts';
import { connectPostgres } from '../lib/database-url.ts';
import { withinDeadline } from '../lib/deadline.ts';
import { shutdownBudget } from '../lib/shutdown-budget.ts';
import { judgeDatabaseAtStart } from './db-start.ts';

// The one path to Postgres. Queries made for a caller run in a transaction
// under the caller's database actor (its role and JWT claims), so row-level
// security decides what they see. The one elevated path is `sql`, the
// connection's own rights: only query functions named `...Elevated` take it,
// and on a request's path they run through `bounded`.

/** What `db.sql` runs as: Supabase's service role (bypasses RLS, owns nothing, no DDL). */
export const ELEVATED_ROLE = 'service_role';
/** `db.sql`, the pool's own connections: above any caller's rights. */
export type ElevatedSql = postgres.Sql;
export type Tx = postgres.TransactionSql;

/** What a transaction runs as: one of the API roles Supabase defines (plugins/auth.ts maps a Caller to one). */
export type DbActor =
  | { role: 'anon'; claims?: Record<string, unknown> }
  | { role: 'authenticated'; claims: Record<string, unknown> }
  | { role: 'service_role' };

/** The actor of a caller whose rights are the service role's (the legacy admin token, a checked API key). */
export const ELEVATED_ACTOR: DbActor = { role: ELEVATED_ROLE };

/**
 * Runs `text`, made of constants alone (values only as `$n` parameters), as
 * a prepared statement; in a chain as anywhere else. For the statements of the
 * busiest reads: a tagged template is built anew on every call, one query
 * object per fragment and the whole text again, a cost the feedback list paid
 * on every request (docs/performance.md). Never splice a value into `text`.
 */
export function fixedStatement<T extends postgres.Row[]>(tx: Tx | ElevatedSql, text: string, values: postgres.SerializableParameter[]) {
  // `simple: false`: without values postgres.js would send it unprepared, which a chain refuses.
  return tx.unsafe<T>(text, values, { prepare: true, simple: false } as postgres.UnsafeQueryOptions);
}

// A prepared statement PostgreSQL no longer accepts as cached: a migration
// changed the shape of what it reads, or the server lost it. postgres.js
// retries such a statement on its own, but not inside a chain, where the retry
// would run outside the transaction and without the caller's role.
const STALE_STATEMENT_ROUTINES = new Set(['RevalidateCachedQuery', 'FetchPreparedStatement']);

function isStaleStatement(error: unknown): boolean {
  const routine = (error as { routine?: unknown } | null)?.routine;
  return typeof routine === 'string' && STALE_STATEMENT_ROUTINES.has(routine);
}

/** A request waited longer than the acquire deadline for a connection. */
export class AcquireTimeoutError extends Error {
  readonly code = 'ACQUIRE_TIMEOUT';
}

/**
 * The pool as request work sees it, for /metrics. postgres.js keeps its own
 * queues private, so this counts what passes through asActor, the chains and
 * `bounded`: the work on a request's path. Background workers' elevated
 * queries are not in it; while they hold every connection, request work shows
 * as waiting.
 */
export interface PoolState {
  /** DATABASE_POOL_MAX. */
  max: number;
  /** Transactions, chains and bounded queries holding a connection. */
  inUse: number;
  /** Transactions, chains and bounded queries waiting for a connection. */
  waiting: number;
  /** Request work refused because no connection came by the acquire deadline, since start. */
  acquireTimeouts: number;
}

export interface Database {
  /** Elevated: bypasses the caller's rights; only query functions named `...Elevated` take it. */
  sql: ElevatedSql;
  /** Runs `work` in one transaction as `actor`, under row-level security. */
  asActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>): Promise<T>;
  /**
   * asActor for reads that issue every statement at once, before awaiting any:
   * the actor's settings and the statements go out in one write and run as
   * one implicit transaction, one round trip in all (asActor takes three). A
   * statement issued after an await is refused; `tx.savepoint` is not there.
   * `work` runs a second time when a cached statement went stale (a migration
   * changed a table it reads), so it must not have effects of its own.
   */
  readAtOnceAsActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>, options?: ChainOptions): Promise<T>;
  /**
   * One statement that writes, chained as readAtOnceAsActor chains reads: the
   * actor's settings and the statement in one round trip. The statement is the
   * chain's last, so it resolves when ReadyForQuery comes, after the implicit
   * transaction's commit; a commit that fails rejects it. Fewer round trips
   * also shorten the time its row locks are held (a transaction holds them
   * until its COMMIT's round trip comes back).
   */
  writeAtOnceAsActor<T>(actor: DbActor, write: (tx: Tx) => Promise<T>, options?: ChainOptions): Promise<T>;
  /** An elevated query on a request's path, refused (and cancelled) when it has not answered by the acquire deadline. */
  bounded<T extends readonly postgres.MaybeRow[]>(query: postgres.PendingQuery<T>): Promise<T>;
  /** Round-trip time of a trivial query, in milliseconds. */
  ping(timeoutMs?: number): Promise<number>;
  /** Ends the pool; queries still running get `timeoutMs` before their connections are closed. */
  close(timeoutMs?: number): Promise<void>;
  /** What request work holds and waits for in the pool now (PoolState). */
  poolState(): PoolState;
}

export interface ChainOptions {
  /**
   * The chain's statements run on their generic plan, made once a connection.
   * Left alone, PostgreSQL plans a prepared statement for its values on its
   * first five runs, and after them whenever its generic plan is costed
   * higher. A `limit $n` parameter is costed as a tenth of the rows, so the
   * feedback list's page was planned anew on every run: about a third of
   * PostgreSQL's work on it (docs/performance.md). Only for statements whose
   * generic plan is the one wanted whatever the values.
   */
  genericPlans?: boolean;
}

export interface DatabaseOptions {
  max?: number;
  /** Longest a statement may run (lock waits included) before Postgres cancels it. */
  statementTimeoutMs?: number;
  /** Longest a request waits for a pooled connection (postgres.js itself would wait forever). */
  acquireTimeoutMs?: number;
  /** Seconds an idle connection stays open. */
  idleTimeoutS?: number;
}

/**
 * Seconds before a closed connection opens again, after `retries` connection
 * errors in a row across the pool: 50 ms doubling, at most 2 s, with jitter.
 * postgres.js's own grows to 20 s, so after a burst of errors (a restart, a
 * failover) the pool stayed closed up to 20 s after PostgreSQL was back; a
 * connection attempt every 1–2 s per connection is nothing to a server that
 * is down.
 */
export function reconnectDelaySeconds(retries: number): number {
  return Math.min(0.05 * 2 ** retries, 2) * (0.5 + Math.random() / 2);
}

/** The actor's role, JWT claims and statement timeout, for the rest of the transaction. */
const SET_ACTOR = `select set_config('role', $1, true), set_config('request.jwt.claims', $2, true), set_config('statement_timeout', $3, true)`;
/** The same, and generic plans for the rest of the transaction (ChainOptions). */
const SET_ACTOR_GENERIC_PLANS = `${SET_ACTOR}, set_config('plan_cache_mode', 'force_generic_plan', true)`;

/** The pool, its caller path and its elevated path; connections open on first use. */
export function connectDatabase(url: string, options: DatabaseOptions = {}): Database {
  const statementTimeoutMs = options.statementTimeoutMs ?? 5_000;
  const acquireTimeoutMs = options.acquireTimeoutMs ?? 5_000;
  const sql = connectPostgres(url, {
    max: options.max ?? 10,
    idle_timeout: options.idleTimeoutS ?? 600,
    connect_timeout: 5,
    backoff: reconnectDelaySeconds,
    onnotice: () => {},
    // The session default, for the elevated paths; asActor sets it again per
    // transaction because a role's own statement_timeout is not applied on SET ROLE.
    // The session's own role is service_role, the elevated path: the login
    // role itself (authenticator) holds nothing, and asActor switches to
    // anon or authenticated per transaction.
    connection: { application_name: 'portfolio-backend', statement_timeout: statementTimeoutMs, role: ELEVATED_ROLE },
  });
  const statementTimeout = `${statementTimeoutMs}ms`;

  // PoolState's counts. A bounded query is waiting until postgres.js puts it
  // on a connection (`state` is set then), read when asked rather than tracked.
  const poolMax = options.max ?? 10;
  let inUse = 0;
  let waiting = 0;
  let acquireTimeouts = 0;
  const boundedPending = new Set<object>();
  /** One piece of request work: waiting for a connection, then holding it, then done. */
  function poolWork() {
    let stage: 'waiting' | 'holding' | 'done' = 'waiting';
    waiting += 1;
    return {
      acquired() {
        if (stage !== 'waiting') return;
        waiting -= 1;
        inUse += 1;
        stage = 'holding';
      },
      done() {
        if (stage === 'waiting') waiting -= 1;
        else if (stage === 'holding') inUse -= 1;
        stage = 'done';
      },
    };
  }
  const acquireTimeout = (message: string) => {
    acquireTimeouts += 1;
    return new AcquireTimeoutError(message);
  };

  const claimsOf = (actor: DbActor) => JSON.stringify('claims' in actor && actor.claims ? actor.claims : { role: actor.role });
  /** Makes the transaction's role, JWT claims and statement timeout the actor's (until it ends). */
  const setActor = (tx: Tx, actor: DbActor, { genericPlans = false }: ChainOptions = {}) =>
    fixedStatement(tx, genericPlans ? SET_ACTOR_GENERIC_PLANS : SET_ACTOR, [actor.role, claimsOf(actor), statementTimeout]);

  async function asActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>): Promise<T> {
    let started = false;
    let expired = false;
    const slot = poolWork();
    const transaction = sql.begin(async (tx) => {
      started = true;
      slot.acquired();
      // Its caller has had its 503 already: give the connection back at once.
      if (expired) throw new AcquireTimeoutError('connection acquired after the deadline');
      // Not awaited on its own: postgres.js pipelines it with the first query
      // of `work`, which saves a round trip per request.
      const setup = setActor(tx, actor);
      setup.catch(() => {});
      const result = await work(tx);
      await setup;
      return result;
    });
    transaction.then(slot.done, slot.done);
    // The deadline is for the connection: a transaction that started runs on under its statement timeout.
    return (await withinDeadline(transaction, acquireTimeoutMs, () => {
      if (started) return undefined;
      expired = true;
      return acquireTimeout(`no database connection within ${acquireTimeoutMs} ms`);
    })) as T;
  }

  async function readAtOnceAsActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>, options?: ChainOptions): Promise<T> {
    try {
      return await readChainedAsActor(actor, work, options);
    } catch (error) {
      if (!isStaleStatement(error)) throw error;
      // The chain was rolled back whole and the driver forgot the statement:
      // running it all again, from the actor's settings, prepares it afresh.
      return readChainedAsActor(actor, work, options);
    }
  }

  async function readChainedAsActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>, options?: ChainOptions): Promise<T> {
    const reservation = sql.reserve();
    const slot = poolWork();
    reservation.then(slot.acquired, slot.done);
    let connection: postgres.ReservedSql;
    try {
      connection = await withinDeadline(reservation, acquireTimeoutMs, () => acquireTimeout(`no database connection within ${acquireTimeoutMs} ms`));
    } catch (error) {
      // Its caller has had its 503: the connection goes back as soon as it comes.
      reservation.then(
        (late) => {
          late.release();
          slot.done();
        },
        () => {},
      );
      throw error;
    }
    try {
      // The patched driver (patches/postgres+3.4.9.patch, "chains") writes what
      // this connection is given until the next turn of the event loop with one
      // Sync at the end: one implicit transaction, and an error skips the rest.
      connection.chain();
      // The chain's sql has everything a query function uses but savepoints.
      const tx = connection as unknown as Tx;
      const setup = setActor(tx, actor, options);
      // Started before `work`, so it is the chain's first statement.
      setup.execute().catch(() => {});
      const result = await work(tx);
      await setup;
      return result;
    } finally {
      connection.release();
      slot.done();
    }
  }

  /** The query's rows, or `expired()` once `ms` have passed; the query is then called off. */
  async function cancelledAtDeadline<T extends readonly postgres.MaybeRow[]>(
    query: postgres.PendingQuery<T>,
    ms: number,
    expired: () => Error,
  ): Promise<T> {
    query.catch(() => {});
    return (await withinDeadline(query, ms, () => {
      // Takes a query that never started out of the queue; one already running gets a cancel request.
      // Left queued, it would run after its caller had its answer, ahead of the requests still waiting.
      void Promise.resolve(query.cancel()).catch(() => {});
      return expired();
    })) as T;
  }

  function bounded<T extends readonly postgres.MaybeRow[]>(query: postgres.PendingQuery<T>): Promise<T> {
    boundedPending.add(query);
    const settled = () => boundedPending.delete(query);
    query.then(settled, settled);
    return cancelledAtDeadline(query, acquireTimeoutMs, () => {
      // Never put on a connection: a wait for one, as the other paths' deadline is.
      if (!onConnection(query)) acquireTimeouts += 1;
      return new AcquireTimeoutError(`no database answer within ${acquireTimeoutMs} ms`);
    });
  }

  /** postgres.js sets a query's `state` (the backend's id) when it writes it to a connection. */
  const onConnection = (query: object) => Boolean((query as { state?: unknown }).state);

  function poolState(): PoolState {
    let boundedWaiting = 0;
    for (const query of boundedPending) if (!onConnection(query)) boundedWaiting += 1;
    return { max: poolMax, inUse: inUse + boundedPending.size - boundedWaiting, waiting: waiting + boundedWaiting, acquireTimeouts };
  }

  async function ping(timeoutMs = 2_000): Promise<number> {
    const started = performance.now();
    await cancelledAtDeadline(sql`select 1`, timeoutMs, () => new Error(`database did not answer within ${timeoutMs} ms`));
    return performance.now() - started;
  }

  return {
    sql,
    asActor,
    readAtOnceAsActor,
    // The same chain: a stale statement rolled the whole of it back, so running it again writes once.
    writeAtOnceAsActor: readAtOnceAsActor,
    bounded,
    ping,
    close: (timeoutMs = 5_000) => sql.end({ timeout: timeoutMs / 1000 }),
    poolState,
  };
}

declare module 'fastify' {
  interface FastifyInstance {
    db: Database;
  }
}

export default fp<{ config: Config; onFatal?: (error: Error) => void }>(
  async function dbPlugin(app: FastifyInstance, { config, onFatal }) {
    const db = connectDatabase(config.DATABASE_URL, {
      max: config.DATABASE_POOL_MAX,
      statementTimeoutMs: config.DATABASE_STATEMENT_TIMEOUT_MS,
      acquireTimeoutMs: config.DATABASE_ACQUIRE_TIMEOUT_MS,
      idleTimeoutS: config.DATABASE_IDLE_TIMEOUT_S,
    });
    app.decorate('db', db);
    const closing = new AbortController();
    app.addHook('onReady', async () => {
      await judgeDatabaseAtStart(db, { production: config.NODE_ENV === 'production', log: app.log, signal: closing.signal, onFatal });
    });
    app.addHook('onClose', async () => {
      closing.abort();
      await db.close(shutdownBudget(config.SHUTDOWN_TIMEOUT_MS).closeMs);
    });
  },
  { name: 'db' },
);
