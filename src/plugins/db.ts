import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import postgres from 'postgres';
import type { Config } from '../config.ts';

// The one path to Postgres. Queries made for a caller run in a transaction
// under the caller's database role with its JWT claims set, so row-level
// security decides what they see; `sql` itself runs with the connection's own
// (elevated) rights and is only used by service operations that say so.

export type Sql = postgres.Sql;
export type Tx = postgres.TransactionSql;

/** Whom a query acts for: the API roles Supabase defines. */
export type DbActor =
  | { role: 'anon' }
  | { role: 'authenticated'; claims: Record<string, unknown> }
  | { role: 'service_role' };

export interface Database {
  /** Elevated: bypasses the caller's rights. Name the operation that uses it. */
  sql: Sql;
  /** Runs `work` in one transaction as `actor`, under row-level security. */
  asActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>): Promise<T>;
  /** Round-trip time of a trivial query, in milliseconds. */
  ping(timeoutMs?: number): Promise<number>;
  close(): Promise<void>;
}

export function createDatabase(url: string, options: { max?: number } = {}): Database {
  const sql = postgres(url, {
    max: options.max ?? 10,
    idle_timeout: 30,
    connect_timeout: 5,
    onnotice: () => {},
    connection: { application_name: 'portfolio-backend' },
  });

  async function asActor<T>(actor: DbActor, work: (tx: Tx) => Promise<T>): Promise<T> {
    const claims = JSON.stringify(actor.role === 'authenticated' ? actor.claims : { role: actor.role });
    return (await sql.begin(async (tx) => {
      // Not awaited on its own: postgres.js pipelines it with the first query
      // of `work`, which saves a round trip per request.
      const setup = tx`select set_config('role', ${actor.role}, true), set_config('request.jwt.claims', ${claims}, true)`;
      setup.catch(() => {});
      const result = await work(tx);
      await setup;
      return result;
    })) as T;
  }

  async function ping(timeoutMs = 2_000): Promise<number> {
    const started = performance.now();
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`database did not answer within ${timeoutMs} ms`)), timeoutMs);
    });
    try {
      await Promise.race([sql`select 1`, timeout]);
    } finally {
      clearTimeout(timer);
    }
    return performance.now() - started;
  }

  return { sql, asActor, ping, close: () => sql.end({ timeout: 5 }) };
}

declare module 'fastify' {
  interface FastifyInstance {
    db: Database;
  }
}

export default fp<{ config: Config }>(
  async function dbPlugin(app: FastifyInstance, { config }) {
    const db = createDatabase(config.DATABASE_URL, { max: config.DATABASE_POOL_MAX });
    app.decorate('db', db);
    app.addHook('onClose', async () => db.close());
  },
  { name: 'db' },
);
