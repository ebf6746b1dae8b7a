import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listFeedback } from '../src/modules/feedback/queries.ts';
import { createFeedbackService } from '../src/modules/feedback/service.ts';
import { expectRefused, legacyAdmin, signedInAdmin, signedInUser } from './support/admin-auth.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { asUser, createAuthUser, grantRole, openTransaction, readsDuring, testSql, untilWaitingOnLock } from './support/db.ts';
import { createWebsite, feedbackBody, pngDataUrl } from './support/feedback-fixtures.ts';
import { usePrivateDatabase } from './support/private-database.ts';

// What an admin needs to answer a feedback sender's erasure request
// (docs/feedback.md, "Erasure requests"): find every item of one address
// (the list's and the export's `email` filter), then delete each
// (DELETE /api/feedback/:id), its screenshot and pending notification with it.

const sql = testSql();
let app: FastifyInstance;
let lines: string[];
let admin: { authorization: string };

beforeAll(async () => {
  ({ app, lines } = await buildTestAppWithLog());
  admin = await legacyAdmin('erasure-admin');
  // Another admin, so that one revoked here is never the last (the database refuses that).
  await grantRole(sql, (await createAuthUser(sql)).id, 'admin');
});
afterAll(async () => {
  await app?.close();
  await sql.end();
});

const REFUSED = { success: false, error: 'Insufficient permissions', statusCode: 403 };

async function submitted(overrides: Record<string, unknown> = {}): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody(overrides) });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

const remove = (id: string, headers: Record<string, string> = admin) => app.inject({ method: 'DELETE', url: `/api/feedback/${id}`, headers });
const stillThere = async (id: string) => (await sql`select 1 from public.feedback where id = ${id}`).length === 1;


describe('DELETE /api/feedback/:id', () => {
  it('deletes the item with its screenshot, its notification and its count; 200 with the id', async () => {
    const websiteId = await createWebsite(sql, 'Erasure site');
    const id = await submitted({ websiteId, screenshot: pngDataUrl(64), comment: 'Secret comment that no log may hold' });
    const kept = await submitted({ websiteId });
    expect(await sql`select 1 from public.feedback_outbox where feedback_id = ${id}`).toHaveLength(1);
    const total = async () => (await app.inject({ url: `/api/feedback/get-feedback?websiteId=${websiteId}`, headers: admin })).json().pagination.total;
    expect(await total()).toBe(2);

    const answer = await remove(id);
    expect([answer.statusCode, answer.json()]).toEqual([200, { success: true, message: 'Feedback deleted successfully', data: { id } }]);
    expect(await stillThere(id)).toBe(false);
    expect(await sql`select 1 from public.feedback_outbox where feedback_id = ${id}`).toHaveLength(0);
    expect((await app.inject({ url: `/api/feedback/${id}/screenshot`, headers: admin })).statusCode).toBe(404);
    expect((await app.inject({ url: `/api/feedback/${id}`, headers: admin })).json()).toEqual({ success: false, error: 'Feedback not found', statusCode: 404 });
    expect(await total()).toBe(1);
    expect(await stillThere(kept)).toBe(true);

    // Logged at info: who deleted which id, never what the item said.
    const logged = lines.map((line) => JSON.parse(line)).filter((line) => line.msg === 'feedback deleted');
    expect(logged).toEqual([expect.objectContaining({ level: 30, feedbackId: id, deletedBy: 'legacy-admin:erasure-admin' })]);
    expect(lines.join('\n')).not.toContain('Secret comment');

    // Deleting it again: it is not there.
    expect((await remove(id)).json()).toEqual({ success: false, error: 'Feedback not found', statusCode: 404 });
  });

  it('a signed-in admin deletes under row-level security; a user without the role gets 403, nothing deleted', async () => {
    const id = await submitted();
    const refused = await remove(id, { authorization: (await signedInUser(sql)).authorization });
    expect([refused.statusCode, refused.json()]).toEqual([403, REFUSED]);
    expect(await stillThere(id)).toBe(true);
    const answer = await remove(id, { authorization: (await signedInAdmin(sql)).authorization });
    expect(answer.statusCode, answer.body).toBe(200);
    expect(await stillThere(id)).toBe(false);
  });

  it('401 without a valid token, 400 for a malformed id, 404 for an unknown one', async () => {
    const id = await submitted();
    await expectRefused(app, { method: 'DELETE', url: `/api/feedback/${id}` });
    expect(await stillThere(id)).toBe(true);
    expect((await remove('not-a-uuid')).json()).toMatchObject({ statusCode: 400, details: { id: ['Feedback id must be a UUID'] } });
    expect((await remove(crypto.randomUUID())).json()).toEqual({ success: false, error: 'Feedback not found', statusCode: 404 });
  });

  it('an admin revoked while the delete waits for the row: 403, and the row stays', async () => {
    const former = await signedInAdmin(sql);
    const id = await submitted();
    const lock = await openTransaction(sql, (tx) => tx`select 1 from public.feedback where id = ${id} for update`);
    const deleting = remove(id, { authorization: former.authorization });
    expect(await untilWaitingOnLock(sql, 'public.feedback')).toBe(true);
    await sql`delete from public.user_roles where user_id = ${former.id} and role = 'admin'`;
    await lock.commit();
    expect((await deleting).json()).toEqual(REFUSED);
    expect(await stillThere(id)).toBe(true);
  });

  it('an admin revoked after the guard read the role, before the delete: 403, not 404', async () => {
    const former = await signedInAdmin(sql);
    const id = await submitted();
    await sql`delete from public.user_roles where user_id = ${former.id} and role = 'admin'`;
    const feedback = createFeedbackService({ db: app.db, captcha: { enabled: false, verify: async () => 'passed' } });
    await expect(feedback.deleteFeedback(former.caller, id, app.log)).rejects.toMatchObject({ statusCode: 403 });
    expect(await stillThere(id)).toBe(true);
  });

  it('row-level security: an admin may delete through the Data API too, anyone else deletes nothing', async () => {
    const id = await submitted();
    const editor = await createAuthUser(sql);
    await grantRole(sql, editor.id, 'editor');
    expect((await asUser(sql, editor.id, (tx) => tx`delete from public.feedback where id = ${id}`)).count).toBe(0);
    const owner = await createAuthUser(sql);
    await grantRole(sql, owner.id, 'admin');
    expect((await asUser(sql, owner.id, (tx) => tx`delete from public.feedback where id = ${id}`)).count).toBe(1);
  });
});

describe('the list and the export filtered by the sender’s address', () => {
  it('finds every item of one address as typed, whatever its case, though it is stored HTML-escaped', async () => {
    const tag = crypto.randomUUID().slice(0, 6);
    const address = `O'Brien.Jane+${tag}@Example.COM`;
    const first = await submitted({ email: address });
    const second = await submitted({ email: `  ${address.toLowerCase()}  ` });
    await submitted({ email: `someone-else-${tag}@example.com` });
    expect((await sql`select email from public.feedback where id = ${first}`)[0].email).toBe(`O&#39;Brien.Jane+${tag}@Example.COM`);

    for (const typed of [address, address.toUpperCase(), ` ${address.toLowerCase()} `]) {
      const list = await app.inject({ url: `/api/feedback/get-feedback?email=${encodeURIComponent(typed)}`, headers: admin });
      expect(list.statusCode, list.body).toBe(200);
      expect(list.json().data.map((item: { id: string }) => item.id).sort(), typed).toEqual([first, second].sort());
      expect(list.json().pagination.total).toBe(2);
    }
    // With the list's other filters, and on the alias.
    await app.inject({ method: 'PUT', url: `/api/feedback/${first}`, headers: admin, payload: { status: 'archived' } });
    const archived = await app.inject({ url: `/api/get-feedback?status=archived&email=${encodeURIComponent(address)}`, headers: admin });
    expect(archived.json().data.map((item: { id: string }) => item.id)).toEqual([first]);
    expect(archived.json().pagination.total).toBe(1);

    // The export takes the same filter, and shows the address as typed.
    const exported = await app.inject({ url: `/api/feedback/export?email=${encodeURIComponent(address.toLowerCase())}`, headers: admin });
    expect(exported.statusCode).toBe(200);
    const rows = exported.body.trim().split('\n').slice(1);
    expect(rows).toHaveLength(2);
    expect(rows.every((row) => row.includes(`O'Brien.Jane+${tag}@Example.COM`) || row.includes(`o'brien.jane+${tag}@example.com`))).toBe(true);

    // Then each is deleted, and nothing of the address is left.
    for (const id of [first, second]) expect((await remove(id)).statusCode).toBe(200);
    const after = await app.inject({ url: `/api/feedback/get-feedback?email=${encodeURIComponent(address)}`, headers: admin });
    expect(after.json()).toMatchObject({ data: [], pagination: { total: 0 } });
  });

  it('an address of white space, an oversized or unstorable one is 400, never the whole list', async () => {
    for (const [query, message] of [
      ['email=%20%20', 'Email must not be empty'],
      [`email=${'a'.repeat(255)}`, 'Email must be at most 254 characters'],
      ['email=a%00b', 'Email must not contain NUL characters or unpaired surrogates'],
    ]) {
      for (const path of ['/api/feedback/get-feedback', '/api/feedback/export']) {
        const answer = await app.inject({ url: `${path}?${query}`, headers: admin });
        expect([answer.statusCode, answer.json().details], `${path}?${query}`).toEqual([400, { email: [message] }]);
      }
    }
  });
});

// Counted, not timed: under row-level security a condition on lower(email)
// runs after the policy, row by row, so an index on that expression went
// unused; the stored folded address is compared in an index condition.
describe('the address filter under row-level security', () => {
  const database = usePrivateDatabase('erasure_plans');

  it("reads the address's index entries, not the table", async () => {
    const { sql: own } = database;
    await own`
      insert into public.feedback (name, email, comment, rating, created_at)
      select 'Name ' || g, 'person' || g || '@Example.test', 'A comment long enough', 3, now() - g * interval '1 second'
        from generate_series(1, 20000) g`;
    await own`vacuum analyze public.feedback`;
    const user = await createAuthUser(own);
    await grantRole(own, user.id, 'admin');
    await asUser(own, user.id, async (tx) => {
      const { result, reads } = await readsDuring(tx, ['feedback'], () =>
        listFeedback(tx, { email: 'PERSON12345@example.TEST' }, { order: 'desc', limit: 20, offset: 0 }),
      );
      expect(result.map((item) => item.name)).toEqual(['Name 12345']);
      expect(reads[0].seqScans).toBe(0);
      expect(reads[0].indexEntries).toBeLessThanOrEqual(2);
    });
  });
});
