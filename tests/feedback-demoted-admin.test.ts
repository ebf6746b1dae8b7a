import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFeedbackService } from '../src/modules/feedback/service.ts';
import { buildTestApp } from './support/app.ts';
import { legacyAdmin, signedInAdmin } from './support/admin-auth.ts';
import { createAuthUser, grantRole, openTransaction, testSql, untilWaitingOnLock } from './support/db.ts';
import { feedbackBody } from './support/feedback-fixtures.ts';

// PUT /api/feedback/:id by an admin whose role is revoked while the change is
// under way. The update's policy asks for the role in a subquery, which reads
// the statement's snapshot: an update that waited for the row's lock while
// the role went was re-checked on the row alone, and stored its change.

const sql = testSql();
let app: FastifyInstance;

beforeAll(async () => {
  app = await buildTestApp();
  // Another admin, so that the one revoked is never the last (the database refuses that).
  await grantRole(sql, (await createAuthUser(sql)).id, 'admin');
});
afterAll(async () => {
  await app?.close();
  await sql.end();
});

const REFUSED = { success: false, error: 'Insufficient permissions', statusCode: 403 };
const UNTOUCHED = { status: 'pending', admin_notes: null, resolved_by: null, resolved_at: null };
const triage = { status: 'resolved' as const, adminNotes: 'Looked at it', resolvedBy: 'Grace' };

async function submitted(): Promise<string> {
  const response = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody() });
  expect(response.statusCode, response.body).toBe(201);
  return response.json().data.id;
}

const stored = async (id: string) =>
  (await sql`select status::text, admin_notes, resolved_by, resolved_at from public.feedback where id = ${id}`)[0];


/**
 * Starts the triage of `id` by `authorization` while a transaction holds the
 * row's lock; once the triage waits for it, `meanwhile` runs, then the lock
 * goes. Resolves with the triage's answer.
 */
async function triageBehindALock(id: string, authorization: string, meanwhile: () => Promise<unknown>) {
  const lock = await openTransaction(sql, (tx) => tx`select 1 from public.feedback where id = ${id} for update`);
  const triaging = app.inject({ method: 'PUT', url: `/api/feedback/${id}`, headers: { authorization }, payload: triage });
  expect(await untilWaitingOnLock(sql, 'public.feedback')).toBe(true);
  await meanwhile();
  await lock.commit();
  return triaging;
}

describe('PUT /api/feedback/:id by an admin whose role goes', () => {
  it('revoked while the change waits for the row: 403, and nothing changed', async () => {
    const former = await signedInAdmin(sql);
    const id = await submitted();
    const answer = await triageBehindALock(id, former.authorization, () => sql`delete from public.user_roles where user_id = ${former.id} and role = 'admin'`);
    expect(answer.json()).toEqual(REFUSED);
    expect(await stored(id)).toEqual(UNTOUCHED);
  });

  it('an admin who keeps the role through the wait has the change stored', async () => {
    const kept = await signedInAdmin(sql);
    const id = await submitted();
    const answer = await triageBehindALock(id, kept.authorization, async () => {});
    expect(answer.statusCode, answer.body).toBe(200);
    expect(answer.json().data).toMatchObject({ id, status: 'resolved' });
    expect(await stored(id)).toMatchObject({ status: 'resolved', admin_notes: 'Looked at it', resolved_by: 'Grace' });
  });

  it('the legacy admin token (the service role) waits and writes as before', async () => {
    const id = await submitted();
    const answer = await triageBehindALock(id, (await legacyAdmin()).authorization, async () => {});
    expect(answer.statusCode, answer.body).toBe(200);
    expect(await stored(id)).toMatchObject({ status: 'resolved', resolved_by: 'Grace' });
  });

  it('revoked after the guard read it, before the write began: 403, not 404 for a row it no longer sees', async () => {
    const former = await signedInAdmin(sql);
    const id = await submitted();
    await sql`delete from public.user_roles where user_id = ${former.id} and role = 'admin'`;
    const feedback = createFeedbackService({ db: app.db, captcha: { enabled: false, verify: async () => 'passed' } });
    await expect(feedback.triageFeedback(former.caller, id, triage)).rejects.toMatchObject({ statusCode: 403, message: 'Insufficient permissions' });
    expect(await stored(id)).toEqual(UNTOUCHED);
    // An id no row has is 403 too: a caller without the role is told nothing of which rows there are.
    await expect(feedback.triageFeedback(former.caller, crypto.randomUUID(), triage)).rejects.toMatchObject({ statusCode: 403 });
  });
});
