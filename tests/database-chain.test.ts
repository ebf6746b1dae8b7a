import net from 'node:net';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { asLoginRole } from '../src/lib/database-url.ts';
import { connectDatabase, fixedStatement } from '../src/plugins/db.ts';

// The patched driver's chains (patches/postgres+3.4.9.patch): the queries a
// reserved connection is given in one turn of the event loop go out in one
// write with one Sync, so PostgreSQL runs them as one implicit transaction.
// readAtOnceAsActor rests on three things checked here against the real
// server: every statement sees what the first one set, an error skips the
// rest, and nothing can join the chain once it is sent. The reserve() fixes
// of the same patch are checked after them, readAtOnceAsActor itself last
// (with writeAtOnceAsActor, the same chain for one write).

const databaseUrl = inject('stack').databaseUrl;
const { hostname, port } = new URL(databaseUrl);

/** Writes to PostgreSQL's socket so far, over every connection of `sql`. */
let writes = 0;
// `socket` is in postgres.js's documented options but not in its types.
const sql = postgres(databaseUrl, {
  max: 1,
  onnotice: () => {},
  socket: () =>
    new Promise<net.Socket>((resolve, reject) => {
      const socket = net.connect(Number(port), hostname);
      const write = socket.write.bind(socket) as (...args: unknown[]) => boolean;
      socket.write = ((...args: unknown[]) => {
        writes += 1;
        return write(...args);
      }) as typeof socket.write;
      socket.once('connect', () => resolve(socket));
      socket.once('error', reject);
    }),
} as postgres.Options<{}>);
/** Another client, for what must not go through the one connection above. */
const admin = postgres(databaseUrl, { max: 1, onnotice: () => {} });

beforeAll(async () => {
  await admin`create table if not exists chain_probe (n int)`;
  await sql`select 1`;
});
afterAll(async () => {
  await admin`drop table if exists chain_probe, chain_shape, chain_stale, chain_write, chain_plans`;
  await Promise.all([sql.end(), admin.end()]);
});

/** Runs `work` on a reserved connection of `sql` with a chain started. */
async function chained<T>(work: (c: postgres.ReservedSql) => Promise<T>): Promise<T> {
  const c = await sql.reserve();
  c.chain();
  try {
    return await work(c);
  } finally {
    c.release();
  }
}

const probeRows = async () => (await admin`select n from chain_probe order by n`).map((row) => row.n);

describe('a chain of queries', () => {
  it('is one write and one transaction: every statement sees the first one’s settings, and the session is itself after', async () => {
    const before = writes;
    const [[first], [second], [third]] = await chained((c) =>
      Promise.all([
        c`select set_config('role', 'anon', true) as role, txid_current()::text as xid`,
        c`select current_user as role, txid_current()::text as xid`,
        c`select current_setting('role') as role, txid_current()::text as xid`,
      ]),
    );
    expect(writes - before).toBe(1);
    expect([first.role, second.role, third.role]).toEqual(['anon', 'anon', 'anon']);
    expect(new Set([first.xid, second.xid, third.xid]).size).toBe(1);
    const [after] = await sql`select current_user as role`;
    expect(after.role).toBe('postgres');

    // The same statements on a reserved connection without a chain: three transactions.
    const c = await sql.reserve();
    try {
      const xids = await Promise.all([1, 2, 3].map(() => c`select txid_current()::text as xid`));
      expect(new Set(xids.map(([row]) => row.xid)).size).toBe(3);
    } finally {
      c.release();
    }
  });

  it('stops at an error: the statements after it are rejected with it, those before it rolled back', async () => {
    const outcomes = await chained((c) =>
      Promise.allSettled([c`insert into chain_probe values (1)`, c`select 1 / 0`, c`insert into chain_probe values (2)`]),
    );
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'rejected']);
    expect(outcomes.slice(1).map((o) => (o as PromiseRejectedResult).reason.code)).toEqual(['22012', '22012']);
    expect(await probeRows()).toEqual([]);
    // The connection serves the pool again.
    expect(await sql`select 2 as n`).toEqual([{ n: 2 }]);
  });

  it('refuses a query made once the chain is sent, and that query never runs', async () => {
    await chained(async (c) => {
      await c`select 1`;
      await expect(c`insert into chain_probe values (3)`).rejects.toMatchObject({ code: 'CHAIN_ENDED' });
    });
    expect(await probeRows()).toEqual([]);
  });

  it('parses a statement new to the connection in the same write, with types from its values', async () => {
    const text = `select $1::text || $2::int as joined, $3::timestamptz as at`;
    const run = () =>
      chained((c) => c.unsafe(text, ['abc', 5, new Date(Date.UTC(2026, 0, 2))]) as unknown as Promise<{ joined: string; at: Date }[]>);
    const before = writes;
    const [fresh] = await run();
    expect(writes - before).toBe(1);
    expect(fresh.joined).toBe('abc5');
    expect(fresh.at.toISOString()).toBe('2026-01-02T00:00:00.000Z');
    // Prepared now: bound with the types the server described.
    const [again] = await run();
    expect(again).toEqual(fresh);
  });

  it('refuses an untyped object before its statement is prepared, and the rest of the chain with it; a typed one passes', async () => {
    const outcomes = await chained((c) =>
      Promise.allSettled([c`select ${{ a: 1 } as never}::jsonb as j`, c`insert into chain_probe values (4)`]),
    );
    expect(outcomes.map((o) => (o.status === 'rejected' ? o.reason.code : o.status))).toEqual(['CHAIN_UNTYPED', 'CHAIN_ENDED']);
    expect(await probeRows()).toEqual([]);
    const [typed] = await chained((c) => c`select ${c.json({ a: 1 })}::jsonb as j`);
    expect(typed.j).toEqual({ a: 1 });
  });

  it('does not retry a statement whose cached plan changed shape (the retry would run outside the chain); the next chain prepares it afresh', async () => {
    await admin`create table chain_shape (a int)`;
    await admin`insert into chain_shape values (1)`;
    const run = () => chained((c) => c`select * from chain_shape`);
    expect(await run()).toEqual([{ a: 1 }]);
    await admin`alter table chain_shape add column b int`;
    await expect(run()).rejects.toMatchObject({ code: '0A000' });
    expect(await run()).toEqual([{ a: 1, b: null }]);
  });
});

describe('reserved connections that close', () => {
  const backendOf = async (c: postgres.ReservedSql) => (await c`select pg_backend_pid() as pid`)[0].pid as number;
  const within = <T>(promise: Promise<T>, ms: number) =>
    Promise.race([promise, new Promise<never>((_, reject) => setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms))]);

  it('a connection killed while reserved is not handed back to the pool on release', async () => {
    const c = await sql.reserve();
    const pid = await backendOf(c);
    await admin`select pg_terminate_backend(${pid})`;
    await new Promise((resolve) => setTimeout(resolve, 200));
    c.release();
    expect(await within(sql`select 3 as n`, 5_000)).toEqual([{ n: 3 }]);
  });

  it('a reserve waiting for the only connection gets it back when that connection is killed', async () => {
    const holder = await sql.reserve();
    const pid = await backendOf(holder);
    const waiting = sql.reserve();
    await admin`select pg_terminate_backend(${pid})`;
    const next = await within(waiting, 5_000);
    try {
      expect(await backendOf(next)).not.toBe(pid);
    } finally {
      next.release();
      holder.release();
    }
  });

  it('a chain whose connection was killed leaves nothing behind: the reconnect serves the pool, not the old chain', async () => {
    const c = await sql.reserve();
    const pid = await backendOf(c);
    c.chain();
    const inFlight = c`select pg_sleep(5)`;
    await new Promise((resolve) => setTimeout(resolve, 100));
    await admin`select pg_terminate_backend(${pid})`;
    await expect(inFlight).rejects.toBeDefined();
    // Before the fix the connection kept the sealed chain, refused its own
    // reconnect's first query (CHAIN_ENDED) and was never handed back: this hung.
    expect(await within(sql`select 4 as n`, 5_000)).toEqual([{ n: 4 }]);
    c.release();
  });

  it('a reservation whose connection closed runs nothing more, even once the connection serves someone else', async () => {
    const c = await sql.reserve();
    const pid = await backendOf(c);
    await admin`select pg_terminate_backend(${pid})`;
    // The pool reconnects the same connection for its own queries.
    expect(await within(sql`select 5 as n`, 5_000)).toEqual([{ n: 5 }]);
    await expect(within(c`select 6 as n`, 5_000)).rejects.toMatchObject({ code: 'CONNECTION_CLOSED' });
    c.release();
    expect(await within(sql`select 7 as n`, 5_000)).toEqual([{ n: 7 }]);
  });
});

describe('readAtOnceAsActor', () => {
  const db = connectDatabase(asLoginRole(databaseUrl), { max: 1, statementTimeoutMs: 1_234 });
  afterAll(() => db.close());

  it('runs its statements as the actor, with its claims and the statement timeout, then the session is the elevated role again', async () => {
    const claims = { sub: '00000000-0000-4000-8000-000000000001', role: 'authenticated' };
    const [[who], [timeout]] = await db.readAtOnceAsActor({ role: 'authenticated', claims }, (tx) =>
      Promise.all([
        tx`select current_user as role, current_setting('request.jwt.claims', true)::jsonb as claims`,
        tx`select current_setting('statement_timeout') as value`,
      ]),
    );
    expect(who).toEqual({ role: 'authenticated', claims });
    expect(timeout.value).toBe('1234ms');
    const [session] = await db.sql`select current_user as role`;
    expect(session.role).toBe('service_role');
  });

  it('runs the whole chain again, settings first, when a migration changed the shape of a cached statement', async () => {
    await admin`create table chain_stale (a int)`;
    await admin`insert into chain_stale values (1)`;
    await admin`grant select on chain_stale to anon`;
    let runs = 0;
    const read = () =>
      db.readAtOnceAsActor({ role: 'anon' }, (tx) => {
        runs += 1;
        return Promise.all([tx`select current_user as role`, tx`select * from chain_stale`]);
      });
    expect((await read())[1]).toEqual([{ a: 1 }]);
    await admin`alter table chain_stale add column b int`;
    runs = 0;
    const [[who], rows] = await read();
    expect(runs).toBe(2);
    expect(who.role).toBe('anon');
    expect(rows).toEqual([{ a: 1, b: null }]);
  });

  it('does not run the chain again for any other error', async () => {
    let runs = 0;
    await expect(
      db.readAtOnceAsActor({ role: 'anon' }, (tx) => {
        runs += 1;
        return tx`select * from chain_no_such_table`;
      }),
    ).rejects.toMatchObject({ code: '42P01' });
    expect(runs).toBe(1);
  });

  it('writeAtOnceAsActor answers after the commit: a write the commit refuses rejects, and nothing is stored', async () => {
    // A deferred constraint is checked at the commit, after the INSERT's CommandComplete has come back.
    await admin`create table chain_write (id int primary key, twin int unique deferrable initially deferred)`;
    await admin`grant select, insert on chain_write to anon`;
    await admin`insert into chain_write values (1, 1)`;
    const insert = (id: number, twin: number) => db.writeAtOnceAsActor({ role: 'anon' }, (tx) => tx`insert into chain_write values (${id}, ${twin})`);
    await expect(insert(2, 1)).rejects.toMatchObject({ code: '23505' });
    await insert(3, 3);
    expect(await admin`select id from chain_write order by id`).toEqual([{ id: 1 }, { id: 3 }]);
    // The connection is usable afterwards, as the elevated role.
    const [session] = await db.sql`select current_user as role`;
    expect(session.role).toBe('service_role');
  });

  it('with genericPlans, runs the chain’s statements on their generic plan, for that chain alone', async () => {
    await admin`create table chain_plans as select n from generate_series(1, 1000) as n`;
    await admin`create index on chain_plans (n)`;
    await admin`analyze chain_plans`;
    await admin`grant select on chain_plans to anon`;
    // Two texts, so each keeps its own counts in pg_prepared_statements.
    const generic = 'select n from chain_plans order by n limit $1';
    const planned = 'select n as m from chain_plans order by n limit $1';
    for (let run = 0; run < 8; run++) {
      const rows = await db.readAtOnceAsActor({ role: 'anon' }, (tx) => fixedStatement(tx, generic, [3]), { genericPlans: true });
      expect(rows).toEqual([{ n: 1 }, { n: 2 }, { n: 3 }]);
      await db.readAtOnceAsActor({ role: 'anon' }, (tx) => fixedStatement(tx, planned, [3]));
    }
    const plans = await db.sql`
      select statement, generic_plans::int, custom_plans::int from pg_prepared_statements
       where statement in (${generic}, ${planned}) order by statement`;
    // Without the option PostgreSQL plans the first five runs for their values, as it always does.
    expect(plans).toEqual([
      { statement: planned, generic_plans: expect.any(Number), custom_plans: expect.any(Number) },
      { statement: generic, generic_plans: 8, custom_plans: 0 },
    ]);
    expect(plans[0].custom_plans).toBeGreaterThanOrEqual(5);
    const [session] = await db.sql`select current_setting('plan_cache_mode') as mode`;
    expect(session.mode).toBe('auto');
  });

  it('refuses a statement made after an await, so nothing runs outside the actor’s settings', async () => {
    await expect(
      db.readAtOnceAsActor({ role: 'anon' }, async (tx) => {
        await tx`select 1`;
        return tx`select current_user`;
      }),
    ).rejects.toMatchObject({ code: 'CHAIN_ENDED' });
    expect(await db.sql`select 1 as n`).toEqual([{ n: 1 }]);
  });
});
