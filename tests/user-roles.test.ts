import type { FastifyInstance } from 'fastify';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRolesService } from '../src/modules/roles/service.ts';
import { buildTestApp } from './support/app.ts';
import { expectRefused, legacyAdmin, signedInAdmin } from './support/admin-auth.ts';
import { asUser, createAuthUser, grantRole, openTransaction, testSql, untilWaitingOnLock } from './support/db.ts';
import { createPrivateDatabase } from './support/private-database.ts';

// /api/userRoles, the role-change record, and the last-admin rule. The rule
// is about the whole table, so it is tested in a database of this file's own.

describe('/api/userRoles', () => {
  let app: FastifyInstance;
  let sql: postgres.Sql;
  let admin: { authorization: string };
  const opsId = crypto.randomUUID();

  beforeAll(async () => {
    app = await buildTestApp();
    sql = testSql();
    admin = await legacyAdmin(opsId);
  });
  afterAll(async () => {
    await app.close();
    await sql.end();
  });

  const setRoles = (userId: string, roles: unknown) =>
    app.inject({ method: 'POST', url: `/api/userRoles/${userId}`, headers: admin, payload: { roles } });

  it.each([
    ['GET', `/api/userRoles/${crypto.randomUUID()}`],
    ['POST', `/api/userRoles/${crypto.randomUUID()}`],
  ] as const)('%s %s refuses missing, garbage and forged tokens with 401', async (method, url) => {
    await expectRefused(app, { method, url, ...(method === 'POST' ? { payload: { roles: [] } } : {}) });
  });

  it('reads and replaces the assigned set, recording who changed what for whom', async () => {
    const user = await createAuthUser(sql);
    await grantRole(sql, user.id, 'viewer');
    const read = await app.inject({ method: 'GET', url: `/api/userRoles/${user.id}`, headers: admin });
    expect(read.statusCode).toBe(200);
    expect(read.json()).toEqual({ success: true, data: { userId: user.id, roles: ['viewer'] } });

    const replaced = await setRoles(user.id, ['editor', 'viewer', 'editor']);
    expect(replaced.statusCode).toBe(200);
    expect(replaced.json()).toEqual({ success: true, message: 'Roles updated', data: { userId: user.id, roles: ['editor', 'viewer'] } });
    // The same set again changes and records nothing.
    expect((await setRoles(user.id, ['viewer', 'editor'])).statusCode).toBe(200);
    const emptied = await setRoles(user.id, []);
    expect(emptied.json().data.roles).toEqual([]);

    const changes = await sql`select role::text, action, changed_by from public.role_changes where user_id = ${user.id} order by id`;
    expect(changes.map((c) => [c.role, c.action, c.changed_by])).toEqual([
      ['viewer', 'granted', 'database:postgres'],
      ['editor', 'granted', `legacy-admin:${opsId}`],
      ['viewer', 'revoked', `legacy-admin:${opsId}`],
      ['editor', 'revoked', `legacy-admin:${opsId}`],
    ]);
  });

  it("concurrent replacements of one user's roles end in one of the sets asked for, never a mix or a 500", async () => {
    // Each replacement deletes what it does not want and inserts what it does:
    // interleaved, two of them kept both sets' grants, or deadlocked (500).
    for (let trial = 0; trial < 12; trial += 1) {
      const user = await createAuthUser(sql);
      if (trial % 2 === 1) {
        await grantRole(sql, user.id, 'editor');
        await grantRole(sql, user.id, 'viewer');
      }
      const asked = [['editor'], ['viewer']];
      // Every other trial names the user in upper case once: the same user, so the same turn to take.
      const answers = await Promise.all(asked.map((roles, i) => setRoles(trial % 2 === 1 && i === 0 ? user.id.toUpperCase() : user.id, roles)));
      expect(answers.map((answer) => answer.statusCode), `trial ${trial}`).toEqual([200, 200]);
      const [{ roles }] = await sql`select coalesce(array_agg(role::text order by role), '{}') as roles from public.user_roles where user_id = ${user.id}`;
      expect(asked, `trial ${trial}: ${roles}`).toContainEqual(roles);
    }
  });

  it('an upper-case id names the same user, and the answer names them as stored (lower case)', async () => {
    const user = await createAuthUser(sql);
    const replaced = await setRoles(user.id.toUpperCase(), ['viewer']);
    expect(replaced.statusCode).toBe(200);
    expect(replaced.json().data).toEqual({ userId: user.id, roles: ['viewer'] });
    const read = await app.inject({ method: 'GET', url: `/api/userRoles/${user.id.toUpperCase()}`, headers: admin });
    expect(read.json().data).toEqual({ userId: user.id, roles: ['viewer'] });
  });

  it('tolerates repeats up to twice the roles there are; a longer list is refused in its own words', async () => {
    const user = await createAuthUser(sql);
    expect((await setRoles(user.id, Array(6).fill('viewer'))).json().data.roles).toEqual(['viewer']);
    const tooMany = await setRoles(user.id, Array(7).fill('viewer'));
    expect(tooMany.statusCode).toBe(400);
    expect(tooMany.json().details).toEqual({ roles: ['Roles must list at most 6 entries'] });
  });

  it('answers 400 for an unknown role, 404 for an unknown user', async () => {
    const user = await createAuthUser(sql);
    const invalid = await setRoles(user.id, ['admin', 'superuser']);
    expect(invalid.statusCode).toBe(400);
    expect(invalid.json()).toMatchObject({ error: 'Validation failed', details: { 'roles.1': ['Role must be one of: admin, editor, viewer'] } });
    expect((await setRoles(user.id, 'admin')).statusCode).toBe(400);
    expect((await setRoles(crypto.randomUUID(), ['viewer'])).json()).toEqual({ success: false, error: 'User not found', statusCode: 404 });
    expect((await app.inject({ method: 'GET', url: `/api/userRoles/${crypto.randomUUID()}`, headers: admin })).statusCode).toBe(404);
    expect((await app.inject({ method: 'GET', url: '/api/userRoles/nobody', headers: admin })).statusCode).toBe(400);
  });

  it('an account deleted while its roles are being set: 404 User not found, as once it is gone', async () => {
    const user = await createAuthUser(sql);
    const deletion = await openTransaction(sql, (tx) => tx`delete from auth.users where id = ${user.id}`);
    // The account is still there for the request's first read; its grant waits on the deletion.
    const setting = setRoles(user.id, ['editor']);
    expect(await untilWaitingOnLock(sql, 'insert into public.user_roles')).toBe(true);
    await deletion.commit();
    const notFound = { success: false, error: 'User not found', statusCode: 404 };
    expect((await setting).json()).toEqual(notFound);
    expect((await setRoles(user.id, ['editor'])).json()).toEqual(notFound);
  });

  const rolesOf = async (userId: string) => (await sql`select role::text from public.user_roles where user_id = ${userId} order by role`).map((r) => r.role);

  it('an admin whose role is revoked while the change waits for its turn: 403, and nothing changed', async () => {
    // Row-level security hid the user's rows from the delete, which removed
    // nothing and failed nothing, and from the read after it: 200 "Roles
    // updated" with roles [], while the user kept every role.
    const [former, target] = [await signedInAdmin(sql), await createAuthUser(sql)];
    await grantRole(sql, (await createAuthUser(sql)).id, 'admin'); // so that the one revoked is not the last admin
    await grantRole(sql, target.id, 'editor');
    // Only revokes, and a grant too (refused by the insert policy).
    for (const roles of [[], ['viewer']]) {
      await grantRole(sql, former.id, 'admin');
      const turn = await openTransaction(sql, (tx) => tx`select pg_advisory_xact_lock(hashtext('public.user_roles'), hashtext(${target.id}))`);
      const setting = app.inject({ method: 'POST', url: `/api/userRoles/${target.id}`, headers: { authorization: former.authorization }, payload: { roles } });
      // Past the guard and the first check, waiting for the turn the test holds.
      expect(await untilWaitingOnLock(sql, "set_config('app.actor'")).toBe(true);
      await sql`delete from public.user_roles where user_id = ${former.id} and role = 'admin'`;
      await turn.commit();
      expect((await setting).json(), `roles [${roles}]`).toEqual({ success: false, error: 'Insufficient permissions', statusCode: 403 });
      expect(await rolesOf(target.id), `roles [${roles}]`).toEqual(['editor']);
    }
  });

  it('a caller no longer an admin is told 403, not 404 for a user it no longer sees, reading or changing roles', async () => {
    // The guard read the admin role; it was revoked before the service's first statement.
    const [former, target] = [await signedInAdmin(sql), await createAuthUser(sql)];
    await grantRole(sql, (await createAuthUser(sql)).id, 'admin');
    await sql`delete from public.user_roles where user_id = ${former.id}`;
    const roles = createRolesService({ db: app.db });
    await expect(roles.setRoles(former.caller, target.id, [], app.log)).rejects.toMatchObject({ statusCode: 403, message: 'Insufficient permissions' });
    // Reading another user's roles too; the former admin still reads its own.
    await expect(roles.getRoles(former.caller, target.id)).rejects.toMatchObject({ statusCode: 403, message: 'Insufficient permissions' });
    await expect(roles.getRoles(former.caller, former.id)).resolves.toEqual({ userId: former.id, roles: [] });
    await grantRole(sql, former.id, 'admin');
    await expect(roles.getRoles(former.caller, crypto.randomUUID())).rejects.toMatchObject({ statusCode: 404, message: 'User not found' });
  });

  it('row-level security: users read their own roles; only admins grant and revoke, in their own name', async () => {
    const [me, other, boss] = [await createAuthUser(sql), await createAuthUser(sql), await createAuthUser(sql)];
    await grantRole(sql, other.id, 'viewer');
    await grantRole(sql, boss.id, 'admin');
    const rolesSeen = (userId: string, of: string) =>
      asUser(sql, userId, async (tx) => (await tx`select role::text from public.user_roles where user_id = ${of}`).map((r) => r.role));
    expect(await rolesSeen(me.id, me.id)).toEqual([]);
    expect(await rolesSeen(me.id, other.id)).toEqual([]);
    expect(await rolesSeen(other.id, other.id)).toEqual(['viewer']);
    expect(await rolesSeen(boss.id, other.id)).toEqual(['viewer']);

    const grant = (userId: string, to: string) =>
      asUser(sql, userId, (tx) => tx`insert into public.user_roles (user_id, role) values (${to}, 'editor')`)
        .then(() => 'granted')
        .catch((error) => error.code);
    expect(await grant(me.id, me.id)).toBe('42501');
    expect(await grant(boss.id, me.id)).toBe('granted');

    const revoked = (userId: string) =>
      asUser(sql, userId, async (tx) => {
        const { count } = await tx`delete from public.user_roles where user_id = ${other.id}`;
        const [change] = await tx`select changed_by from public.role_changes where user_id = ${other.id} and action = 'revoked'`;
        return { count, changedBy: change?.changed_by };
      });
    expect(await revoked(me.id)).toEqual({ count: 0, changedBy: undefined });
    expect(await revoked(boss.id)).toEqual({ count: 1, changedBy: boss.id });
    expect(await asUser(sql, me.id, async (tx) => (await tx`select 1 from public.role_changes`).length)).toBe(0);
  });
});

describe('the last admin (a database of its own)', () => {
  let db: Awaited<ReturnType<typeof createPrivateDatabase>>;
  let sql: postgres.Sql;
  let app: FastifyInstance;
  let admin: { authorization: string };

  beforeAll(async () => {
    db = await createPrivateDatabase('last_admin');
    sql = postgres(db.url, { max: 6, onnotice: () => {} });
    app = await buildTestApp({ DATABASE_URL: db.url });
    admin = await legacyAdmin();
  });
  afterAll(async () => {
    await app?.close();
    await sql?.end();
    await db?.drop();
  });

  const setRoles = (userId: string, roles: string[]) =>
    app.inject({ method: 'POST', url: `/api/userRoles/${userId}`, headers: admin, payload: { roles } });
  const admins = async () => (await sql`select user_id from public.user_roles where role = 'admin' order by user_id`).map((r) => r.user_id);

  it('refuses to remove the last admin with 409, in the API and in SQL', async () => {
    const [x, y] = [await createAuthUser(sql), await createAuthUser(sql)];
    await grantRole(sql, x.id, 'admin');
    await grantRole(sql, y.id, 'admin');
    expect((await setRoles(x.id, ['viewer'])).statusCode).toBe(200);
    const last = await setRoles(y.id, ['editor']);
    expect(last.statusCode).toBe(409);
    expect(last.json()).toEqual({ success: false, error: 'Cannot remove the last admin', statusCode: 409 });
    expect(await admins()).toEqual([y.id]);
    // The refused change left the rest of the set alone too (one transaction).
    expect((await sql`select role::text from public.user_roles where user_id = ${y.id}`).map((r) => r.role)).toEqual(['admin']);
    await expect(sql`delete from public.user_roles where role = 'admin'`).rejects.toMatchObject({ code: 'PT409' });
    await expect(sql`update public.user_roles set role = 'viewer' where user_id = ${y.id}`).rejects.toMatchObject({ code: 'PT409' });
    await sql`delete from public.user_roles where user_id = ${x.id}`;
  });

  it('lets exactly one of two concurrent removals through', async () => {
    const [x, y] = [await createAuthUser(sql), await createAuthUser(sql)];
    for (let round = 0; round < 8; round += 1) {
      await grantRole(sql, x.id, 'admin');
      await grantRole(sql, y.id, 'admin');
      // Any other admin left from the previous test goes first, so x and y are the only two.
      for (const other of (await admins()).filter((id) => id !== x.id && id !== y.id)) {
        await sql`delete from public.user_roles where user_id = ${other}`;
      }
      const results = await Promise.all([setRoles(x.id, []), setRoles(y.id, [])]);
      expect(results.map((r) => r.statusCode).sort()).toEqual([200, 409]);
      expect(await admins()).toHaveLength(1);
    }
  });

  it('serialises removals: the second waits for the first and then sees it', async () => {
    const [x, y] = [await createAuthUser(sql), await createAuthUser(sql)];
    await grantRole(sql, x.id, 'admin');
    await grantRole(sql, y.id, 'admin');
    for (const other of (await admins()).filter((id) => id !== x.id && id !== y.id)) await sql`delete from public.user_roles where user_id = ${other}`;

    const first = postgres(db.url, { max: 1, onnotice: () => {} });
    const second = postgres(db.url, { max: 1, onnotice: () => {} });
    try {
      let commitFirst!: () => void;
      const firstMayCommit = new Promise<void>((resolve) => (commitFirst = resolve));
      let firstDeleted!: () => void;
      const deleted = new Promise<void>((resolve) => (firstDeleted = resolve));
      const firstTx = first.begin(async (tx) => {
        await tx`delete from public.user_roles where user_id = ${x.id} and role = 'admin'`;
        firstDeleted();
        await firstMayCommit;
      });
      await deleted;
      let secondDone = false;
      const secondTx = second
        .begin((tx) => tx`delete from public.user_roles where user_id = ${y.id} and role = 'admin'`)
        .finally(() => (secondDone = true));
      await new Promise((resolve) => setTimeout(resolve, 200));
      expect(secondDone).toBe(false);
      commitFirst();
      await firstTx;
      await expect(secondTx).rejects.toMatchObject({ code: 'PT409' });
      expect(await admins()).toEqual([y.id]);
    } finally {
      await first.end();
      await second.end();
    }
  });

  it('refuses an admin removal under any isolation but READ COMMITTED: its check would read a snapshot older than its lock', async () => {
    const [x, y] = [await createAuthUser(sql), await createAuthUser(sql)];
    await grantRole(sql, x.id, 'admin');
    await grantRole(sql, y.id, 'admin');
    for (const other of (await admins()).filter((id) => id !== x.id && id !== y.id)) await sql`delete from public.user_roles where user_id = ${other}`;

    // SERIALIZABLE too: PostgreSQL would find the conflict only with another serializable
    // transaction, and the API's removals run under READ COMMITTED.
    for (const isolation of ['repeatable read', 'serializable']) {
      await expect(sql.begin(`isolation level ${isolation}`, (tx) => tx`delete from public.user_roles where user_id = ${x.id} and role = 'admin'`), isolation).rejects.toMatchObject({
        code: '25001',
        message: 'an admin role can be removed only under READ COMMITTED',
      });
    }
    expect(await admins()).toEqual([x.id, y.id].sort());
    // A grant, and a removal of another role, are no concern of the check.
    await sql.begin('isolation level serializable', async (tx) => {
      await tx`insert into public.user_roles (user_id, role) values (${x.id}, 'viewer')`;
      await tx`delete from public.user_roles where user_id = ${x.id} and role = 'viewer'`;
    });
    await sql`delete from public.user_roles where user_id = ${y.id}`;
  });

  it('still lets the account of the last admin be deleted (a decision about the account)', async () => {
    const [only] = await admins();
    await sql.begin(async (tx) => {
      await tx`set local role supabase_auth_admin`;
      await tx`delete from auth.users where id = ${only}`;
    });
    expect(await admins()).toEqual([]);
    const [change] = await sql`select action, changed_by from public.role_changes where user_id = ${only} order by id desc limit 1`;
    expect(change).toMatchObject({ action: 'revoked', changed_by: 'database:postgres' });
  });
});
