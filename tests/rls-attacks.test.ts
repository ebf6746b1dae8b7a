import { createHash, randomUUID } from 'node:crypto';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertEvents } from './support/analytics.ts';
import { asUser, createAuthUser, grantRole, type TestUser } from './support/db.ts';
import { createWebsite } from './support/feedback-fixtures.ts';
import { createPrivateDatabase } from './support/private-database.ts';
import {
  type Attacker,
  attempt,
  columnsWith,
  describeOutcome,
  ident,
  markedRows,
  ownRowCount,
  publicTables,
  qualified,
  refusedOrNoRows,
  type TableInfo,
} from './support/rls-probe.ts';

// Issue 7, RLS attacks. Generic over schema public: every table has
// row-level security, and anon or a fresh signed-in user without roles can
// neither read others' rows nor insert, update, delete or truncate anything
// that is not theirs. The targeted attacks (rls-attacks-targeted.test.ts) name
// the ones that matter most. Direct SQL under claims (tests/support/db.ts):
// there is no auth server here to issue real sessions.

// A database of this file's own: the probes run against every table, and on
// a shared one they waited on locks other files hold (a timed-out run, twice).
const database = await createPrivateDatabase('rls_attacks');
const sql = postgres(database.url, { max: 4, onnotice: () => {} });
afterAll(async () => {
  await sql.end();
  await database.drop();
});

// Read at load time so each table is its own test; a new table shows up here by itself.
const tables = await publicTables(sql);

let victim: TestUser;
let outsider: TestUser;
let markers: string[];
const before = new Map<string, Record<string, unknown>[]>();

// One row of another user (the victim) in every table: a profile, a role and
// its role_changes record, a website with analytics events (and so rows in
// every rollup), feedback (and so an outbox row, a count and a change not yet
// counted) and a client log entry.
beforeAll(async () => {
  victim = await createAuthUser(sql, { name: 'Victim Owner' });
  await grantRole(sql, victim.id, 'editor');
  const websiteId = await createWebsite(sql, 'RLS attack target');
  await sql`update public.websites set created_by = ${victim.id} where id = ${websiteId}`;
  const feedbackId = randomUUID();
  await sql`
    insert into public.feedback (id, name, email, comment, rating, website_id)
    values (${feedbackId}, 'Victim Owner', ${victim.email}, 'Feedback that only admins may read', 2, ${websiteId})`;
  // The answer an Idempotency-Key keeps for it (modules/feedback/idempotency.ts).
  await sql`
    insert into public.feedback_idempotency_keys (scoped_key, request_hash, claim_id, answer_status, answer_data, feedback_id)
    values (${createHash('sha256').update(feedbackId).digest()}, ${createHash('sha256').update('the request').digest()}, ${randomUUID()},
            201, ${sql.json({ id: feedbackId, status: 'pending' })}, ${feedbackId})`;
  // A second one while another transaction holds the counts' fold lock: its
  // change waits in feedback_count_changes (the first was folded into feedback_counts).
  await sql.begin(async (holder) => {
    await holder`select pg_advisory_xact_lock(hashtext('public.feedback_counts'))`;
    await sql`
      insert into public.feedback (name, email, comment, rating, status, website_id)
      values ('Victim Owner', ${victim.email}, 'Archived feedback that only admins may count', 2, 'archived', ${websiteId})`;
  });
  const at = new Date().toISOString();
  const session = `session-${feedbackId}`;
  await insertEvents(sql, websiteId, [
    {
      page: '/',
      session,
      visitor: `visitor-${victim.id}`,
      device: 'desktop',
      at,
      referrerHost: 'example.org',
      loadTime: 120,
      country: 'NL',
      campaign: { source: 'newsletter', medium: 'email', name: 'launch' },
    },
    { type: 'click', page: '/pricing', session, visitor: `visitor-${victim.id}`, device: 'desktop', at },
  ]);
  await sql`
    insert into public.app_logs (level, message, context, source, user_id)
    values ('warn', 'a client entry of the victim', ${sql.json({ websiteId })}, 'client', ${victim.id})`;
  outsider = await createAuthUser(sql, { name: 'Fresh Outsider' });
  markers = [victim.id, websiteId, feedbackId];
  for (const table of tables) before.set(table.name, await markedRows(sql, table.name, markers));
});

const attackers = (): Attacker[] => [
  { label: 'anon', role: 'anon', userId: null },
  { label: 'authenticated without roles', role: 'authenticated', userId: outsider.id },
];

describe('schema public', () => {
  it('has row-level security on every table', () => {
    expect(tables.map((t) => t.name)).toEqual(
      expect.arrayContaining(['profiles', 'user_roles', 'websites', 'feedback', 'feedback_outbox', 'analytics_events', 'app_logs', 'role_changes']),
    );
    expect(tables.filter((t) => !t.rowSecurity).map((t) => t.name)).toEqual([]);
  });

  it('gives the API roles no TRUNCATE, REFERENCES or TRIGGER on any table, and no rights on its sequences', async () => {
    // service_role too: a trigger is a change to the schema, and TRUNCATE passes the last-admin rule and role_changes by.
    const tableRights = await sql`
      select c.relname, r.role
        from pg_class c join pg_namespace n on n.oid = c.relnamespace, (values ('anon'), ('authenticated'), ('service_role')) as r (role)
       where n.nspname = 'public' and c.relkind in ('r', 'p') and has_table_privilege(r.role, c.oid, 'TRUNCATE, REFERENCES, TRIGGER')`;
    expect(tableRights).toEqual([]);
    // PostgreSQL 17's MAINTAIN (VACUUM, REINDEX, LOCK TABLE), which ALL holds there and an older server does not know.
    const [{ version }] = await sql`select current_setting('server_version_num')::int as version`;
    if (version >= 170000) {
      const maintainRights = await sql`
        select c.relname, r.role
          from pg_class c join pg_namespace n on n.oid = c.relnamespace, (values ('anon'), ('authenticated'), ('service_role')) as r (role)
         where n.nspname = 'public' and c.relkind in ('r', 'p') and has_table_privilege(r.role, c.oid, 'MAINTAIN')`;
      expect(maintainRights).toEqual([]);
    }
    // The record of role changes is its trigger's to write: every API role may at most read it.
    const auditRights = await sql`
      select r.role from (values ('anon'), ('authenticated'), ('service_role')) as r (role)
       where has_table_privilege(r.role, 'public.role_changes', 'INSERT, UPDATE, DELETE')`;
    expect(auditRights).toEqual([]);
    // UPDATE on a sequence is setval: resetting an identity makes its table's writers fail on duplicate keys.
    const sequenceRights = await sql`
      select c.relname, r.role
        from pg_class c join pg_namespace n on n.oid = c.relnamespace, (values ('anon'), ('authenticated')) as r (role)
       where n.nspname = 'public' and c.relkind = 'S' and has_sequence_privilege(r.role, c.oid, 'SELECT, USAGE, UPDATE')`;
    expect(sequenceRights).toEqual([]);
  });

  it('pins search_path on every security definer function', async () => {
    const definers = await sql<{ fn: string; config: string[] | null }[]>`
      select p.oid::regprocedure::text as fn, p.proconfig as config
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'public' and p.prosecdef`;
    expect(definers.length).toBeGreaterThan(0);
    expect(definers.filter((d) => !(d.config ?? []).some((setting) => setting.startsWith('search_path='))).map((d) => d.fn)).toEqual([]);
  });

  it('lets anon and authenticated execute only the security definer functions meant for them', async () => {
    const executable = await sql`
      select p.oid::regprocedure::text as fn, r.role
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace, (values ('anon'), ('authenticated')) as r (role)
       where n.nspname = 'public' and p.prosecdef and has_function_privilege(r.role, p.oid, 'EXECUTE')
       order by 1, 2`;
    // The role checks the policies call (answering only for the caller), and a website's deletion, which checks that its caller is an admin.
    expect(executable).toEqual([
      { fn: 'begin_website_deletion(uuid)', role: 'authenticated' },
      { fn: 'has_any_role(app_role[])', role: 'anon' },
      { fn: 'has_any_role(app_role[])', role: 'authenticated' },
      { fn: 'has_role(app_role)', role: 'anon' },
      { fn: 'has_role(app_role)', role: 'authenticated' },
    ]);
  });

  it('lets neither anon nor authenticated execute a trigger function', async () => {
    const triggers = await sql`
      select p.oid::regprocedure::text as fn
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace
       where n.nspname = 'public' and p.prorettype = 'trigger'::regtype`;
    expect(triggers.length).toBeGreaterThan(0);
    const executable = await sql`
      select p.oid::regprocedure::text as fn, r.role
        from pg_proc p join pg_namespace n on n.oid = p.pronamespace, (values ('anon'), ('authenticated')) as r (role)
       where n.nspname = 'public' and p.prorettype = 'trigger'::regtype and has_function_privilege(r.role, p.oid, 'EXECUTE')`;
    expect(executable).toEqual([]);
  });
});

/** The statements tried against one table: each returns undefined when it does not apply. */
async function probesFor(table: TableInfo, target: Record<string, unknown>, attacker: Attacker) {
  const q = qualified(table.name);
  const list = (columns: string[]) => columns.map(ident).join(', ');
  const settable = table.columns.filter((c) => c.settable).map((c) => c.name);
  const insertable = await columnsWith(sql, attacker.role, table, 'INSERT');
  const updatable = await columnsWith(sql, attacker.role, table, 'UPDATE');
  // A copy of the victim's row under a new id, so a unique key cannot be what refuses it.
  const copy = { ...target };
  for (const column of table.columns) if (column.name === 'id' && column.type === 'uuid') copy.id = randomUUID();
  const key = Object.fromEntries((table.primaryKey.length > 0 ? table.primaryKey : settable).map((name) => [name, target[name]]));
  const setColumn = ident(updatable[0] ?? settable[0]);
  const insertCopy = (columns: string[]) => (tx: postgres.TransactionSql) =>
    tx.unsafe(`insert into ${q} (${list(columns)}) select ${list(columns)} from jsonb_populate_record(null::${q}, $1::text::jsonb)`, [JSON.stringify(copy)]);
  return {
    /** Not an attack: shows the key below finds the victim's row when nothing stands in the way. */
    match: (tx: postgres.TransactionSql) => tx.unsafe(`select 1 from ${q} as t where to_jsonb(t) @> $1::text::jsonb`, [JSON.stringify(key)]),
    'insert all columns': insertCopy(settable),
    'insert granted columns': insertable.length > 0 ? insertCopy(insertable) : undefined,
    "update the victim's row": (tx: postgres.TransactionSql) =>
      tx.unsafe(`update ${q} as t set ${setColumn} = t.${setColumn} where to_jsonb(t) @> $1::text::jsonb`, [JSON.stringify(key)]),
    'update every row': (tx: postgres.TransactionSql) => tx.unsafe(`update ${q} as t set ${setColumn} = t.${setColumn}`),
    "delete the victim's row": (tx: postgres.TransactionSql) => tx.unsafe(`delete from ${q} as t where to_jsonb(t) @> $1::text::jsonb`, [JSON.stringify(key)]),
    'delete every row': (tx: postgres.TransactionSql) => tx.unsafe(`delete from ${q}`),
    truncate: (tx: postgres.TransactionSql) => tx.unsafe(`truncate ${q}`),
  };
}

describe('as anon and as a signed-in user without roles, on every table', () => {
  it.each(tables.map((t) => t.name))('%s: reads none of the victim\'s rows and changes nothing', async (name) => {
    const table = tables.find((t) => t.name === name)!;
    const fixture = before.get(name)!;
    expect(fixture.length, `no row of this test's victim in ${name}: add one to the fixtures`).toBeGreaterThan(0);
    const failures: string[] = [];
    const unchanged = (tx: postgres.TransactionSql) => markedRows(tx, name, markers);

    for (const attacker of attackers()) {
      const read = await attempt(sql, attacker, (tx) => tx.unsafe(`select to_jsonb(t) as row from ${qualified(name)} as t`), unchanged);
      if (read.outcome.refused) {
        if (read.outcome.code !== '42501') failures.push(`${attacker.label} select: ${describeOutcome(read.outcome)}`);
      } else {
        const foreign = read.outcome.rows.map((r) => JSON.stringify(r.row)).filter((text) => !attacker.userId || !text.includes(attacker.userId));
        if (foreign.length > 0) failures.push(`${attacker.label} select: sees ${foreign.length} row(s) of others, e.g. ${foreign[0].slice(0, 200)}`);
      }

      const own = await ownRowCount(sql, name, attacker.userId);
      const { match: _, ...probes } = await probesFor(table, fixture[0], attacker);
      for (const [probe, statement] of Object.entries(probes)) {
        if (!statement) continue;
        const { outcome, after } = await attempt(sql, attacker, statement, unchanged);
        const label = `${attacker.label} ${probe}`;
        const everyRow = probe.endsWith('every row');
        const acceptable =
          probe === 'truncate'
            ? outcome.refused && outcome.code === '42501'
            : everyRow
              ? refusedOrNoRows(outcome) || (!outcome.refused && outcome.count <= own)
              : refusedOrNoRows(outcome);
        if (!acceptable) failures.push(`${label}: ${describeOutcome(outcome)}`);
        // The victim's rows as the attack left them, read by the superuser in the same transaction.
        const untouched = fixture.every((row) => after.some((a) => JSON.stringify(a) === JSON.stringify(row)));
        if (!untouched || after.length !== fixture.length) failures.push(`${label}: the victim's rows changed`);
      }
    }
    expect(failures).toEqual([]);
    // Every attempt was rolled back: the superuser sees the victim's rows as they were.
    expect(await markedRows(sql, name, markers)).toEqual(fixture);
  });
});

// The probes above would be vacuous if their WHERE clauses or copies missed
// the victim's rows; as service_role (which bypasses row-level security) the
// same statements reach them.
describe('control: the same probes as service_role', () => {
  const service: Attacker = { label: 'service_role', role: 'service_role', userId: null };

  it.each(tables.map((t) => t.name))('%s: the key finds the victim\'s row and the copy is a valid row', async (name) => {
    const table = tables.find((t) => t.name === name)!;
    const fixture = before.get(name)!;
    const probes = await probesFor(table, fixture[0], service);
    const match = await attempt(sql, service, probes.match, async () => undefined);
    expect(match.outcome).toMatchObject({ refused: false, count: 1 });
    const copy = await attempt(sql, service, probes['insert all columns'], async () => undefined);
    // Accepted, or refused for what the row is (a duplicate or dangling key, append-only events), never for its shape.
    // role_changes is its trigger's to write: service_role may only read it.
    if (name === 'role_changes') expect(copy.outcome, describeOutcome(copy.outcome)).toMatchObject({ refused: true, code: '42501' });
    else if (copy.outcome.refused) expect(['23503', '23505', '55000'], describeOutcome(copy.outcome)).toContain(copy.outcome.code);
    else expect(copy.outcome.count).toBe(1);
  });
});
