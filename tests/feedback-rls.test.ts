import { randomUUID } from 'node:crypto';
import type postgres from 'postgres';
import { afterAll, describe, expect, it } from 'vitest';
import { asClaims, asUser, createAuthUser, grantRole, testSql } from './support/db.ts';

// Row-level security on feedback and its outbox, checked with direct SQL
// under given callers' claims: the API's submitter (anon with its claim) may
// submit and read nothing, the Data API's callers (the anon key, a signed-in
// user's token) may not submit at all, signed-in users without the admin
// role see and change nothing, admins triage.

/** The claims the API submits with (src/modules/feedback/service.ts). */
const API_SUBMITTER = { role: 'anon' as const, submitted_via: 'api' };
/** The claims of the project's anon key, as the Data API sets them. */
const ANON_KEY = { iss: 'supabase', ref: 'portfolio', role: 'anon' as const, iat: 1_700_000_000, exp: 2_000_000_000 };

const sql = testSql();
afterAll(() => sql.end());

async function feedbackRow(): Promise<string> {
  const id = randomUUID();
  await sql`insert into public.feedback (id, name, email, comment, rating) values (${id}, 'Row Owner', 'row@example.test', 'A comment for RLS tests', 3)`;
  return id;
}

const insertAs = (tx: postgres.TransactionSql, id = randomUUID()) =>
  tx`insert into public.feedback (id, name, email, comment, rating) values (${id}, 'Anon Person', 'anon@example.test', 'Submitted straight to the table', 5)`;

describe("anon with the API's claim (the public submitter)", () => {
  it('may insert feedback, and the notification is enqueued in the same transaction', async () => {
    const id = randomUUID();
    const result = await asClaims(sql, API_SUBMITTER, (tx) => insertAs(tx, id));
    expect(result.count).toBe(1);
    // asClaims rolled back; as the table owner, insert and see the trigger's row.
    await sql.begin(async (tx) => {
      await tx`select set_config('role', 'anon', true), set_config('request.jwt.claims', ${JSON.stringify(API_SUBMITTER)}, true)`;
      await insertAs(tx, id);
      await tx`reset role`;
      const outbox = await tx`select feedback_id, attempts from public.feedback_outbox where feedback_id = ${id}`;
      expect(outbox).toEqual([{ feedback_id: id, attempts: 0 }]);
      throw new Error('rollback');
    }).catch((error: Error) => {
      if (error.message !== 'rollback') throw error;
    });
  });

  it('reads nothing, not even its own insert: RETURNING is refused, so the service makes the id', async () => {
    await feedbackRow();
    await expect(asUser(sql, null, (tx) => tx`select id from public.feedback`)).rejects.toMatchObject({ code: '42501' });
    await expect(
      asClaims(sql, API_SUBMITTER, (tx) => tx`insert into public.feedback (name, email, comment, rating) values ('Anon', 'a@example.test', 'Long enough comment', 2) returning id`),
    ).rejects.toMatchObject({ code: '42501' });
  });

  it('cannot set triage fields, update, delete, or touch the outbox', async () => {
    const id = await feedbackRow();
    const refused = [
      (tx: postgres.TransactionSql) =>
        tx`insert into public.feedback (name, email, comment, rating, status) values ('Anon', 'a@example.test', 'Pre-resolved feedback', 2, 'resolved')`,
      (tx: postgres.TransactionSql) =>
        tx`insert into public.feedback (name, email, comment, rating, admin_notes) values ('Anon', 'a@example.test', 'Notes smuggled in', 2, 'x')`,
      (tx: postgres.TransactionSql) => tx`update public.feedback set status = 'archived' where id = ${id}`,
      (tx: postgres.TransactionSql) => tx`delete from public.feedback where id = ${id}`,
      (tx: postgres.TransactionSql) => tx`select * from public.feedback_outbox`,
      (tx: postgres.TransactionSql) => tx`insert into public.feedback_outbox (feedback_id) values (${id})`,
    ];
    for (const query of refused) await expect(asClaims(sql, API_SUBMITTER, query)).rejects.toMatchObject({ code: '42501' });
  });
});

describe("the Data API's callers", () => {
  it('cannot submit past the bot check and the rate limit: not with the anon key, nor with no claims, nor signed in', async () => {
    const user = await createAuthUser(sql);
    const attempts = [
      () => asClaims(sql, ANON_KEY, (tx) => insertAs(tx)),
      () => asClaims(sql, { ...ANON_KEY, submitted_via: 'data-api' }, (tx) => insertAs(tx)),
      () => asUser(sql, null, (tx) => insertAs(tx)),
      () => asUser(sql, user.id, (tx) => insertAs(tx)),
      () => asClaims(sql, { sub: user.id, role: 'authenticated', aud: 'authenticated', submitted_via: 'api' }, (tx) => insertAs(tx)),
    ];
    for (const attempt of attempts) await expect(attempt()).rejects.toMatchObject({ code: '42501' });
    // Nor with no claims set at all (an empty setting is not JSON, and must not be a 500's 22P02).
    await expect(
      sql.begin(async (tx) => {
        await tx`select set_config('role', 'anon', true), set_config('request.jwt.claims', '', true)`;
        await insertAs(tx);
      }),
    ).rejects.toMatchObject({ code: '42501' });
  });
});

describe('a signed-in user without the admin role', () => {
  it('sees no feedback and changes none', async () => {
    const user = await createAuthUser(sql);
    await grantRole(sql, user.id, 'editor');
    const id = await feedbackRow();
    expect(await asUser(sql, user.id, (tx) => tx`select id from public.feedback where id = ${id}`)).toHaveLength(0);
    expect(await asUser(sql, user.id, (tx) => tx`select count(*)::int as n from public.feedback`)).toEqual([{ n: 0 }]);
    const updated = await asUser(sql, user.id, (tx) => tx`update public.feedback set status = 'resolved', resolved_at = now() where id = ${id} returning id`);
    expect(updated).toHaveLength(0);
    expect((await sql`select status from public.feedback where id = ${id}`)[0].status).toBe('pending');
  });

  it('cannot read the outbox (nor submit as themselves: the API submits as anon)', async () => {
    const user = await createAuthUser(sql);
    await expect(asUser(sql, user.id, (tx) => tx`select * from public.feedback_outbox`)).rejects.toMatchObject({ code: '42501' });
  });
});

describe('an admin', () => {
  it('reads and triages feedback with their own claims', async () => {
    const admin = await createAuthUser(sql);
    await grantRole(sql, admin.id, 'admin');
    const id = await feedbackRow();
    expect(await asUser(sql, admin.id, (tx) => tx`select id from public.feedback where id = ${id}`)).toEqual([{ id }]);
    const updated = await asUser(
      sql,
      admin.id,
      (tx) => tx`update public.feedback set status = 'resolved', resolved_at = now(), resolved_by = ${admin.id}, admin_notes = 'ok' where id = ${id} returning status`,
    );
    expect(updated).toEqual([{ status: 'resolved' }]);
    // The outbox stays closed even to admins: only the service's connection sends.
    await expect(asUser(sql, admin.id, (tx) => tx`select * from public.feedback_outbox`)).rejects.toMatchObject({ code: '42501' });
  });

  it('cannot break the status rules: resolved gets its resolved_at (the table sets it), pending has no resolver', async () => {
    const admin = await createAuthUser(sql);
    await grantRole(sql, admin.id, 'admin');
    const id = await feedbackRow();
    await expect(asUser(sql, admin.id, (tx) => tx`update public.feedback set resolved_by = 'x' where id = ${id}`)).rejects.toMatchObject({
      code: '23514',
    });
    const [resolved] = await asUser(sql, admin.id, (tx) => tx`update public.feedback set status = 'resolved' where id = ${id} returning resolved_at`);
    expect(resolved.resolved_at).toBeInstanceOf(Date);
    await expect(
      asUser(sql, admin.id, (tx) => tx`update public.feedback set status = 'pending', resolved_by = 'x' where id = ${id}`),
    ).rejects.toMatchObject({ code: '23514' });
  });
});
