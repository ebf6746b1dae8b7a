import { afterAll, describe, expect, it } from 'vitest';
import { ANALYTICS_TABLES, insertEvents } from './support/analytics.ts';
import { asUser, createAuthUser, grantRole, testSql } from './support/db.ts';
import { createWebsite } from './support/feedback-fixtures.ts';

// Row-level security asks for the caller's roles once a statement: a policy
// open to several roles asks has_any_role for the set, never has_role for
// each role in turn (three lookups for an admin in every statement of an
// analytics summary; 20261128000100_one_role_lookup_per_policy.sql).

const sql = testSql();
afterAll(() => sql.end());

/** The tables the analytics routes read, each open to viewers, editors and admins. */
const TABLES_OPEN_TO_EVERY_ROLE = ['websites', ...ANALYTICS_TABLES];

const ROLE_CHECK = /\bhas_(?:any_)?role\(/g;
const roleChecksIn = (expression: string | null) => (expression ?? '').match(ROLE_CHECK)?.length ?? 0;

/**
 * How many times `statement` called each role function, run as `userId` under
 * RLS. PostgreSQL counts a backend's calls while track_functions is on (a
 * superuser's setting, made before the role switch) and reports them only
 * now and then, so the counts are read just before and just after.
 */
async function roleChecksOf(userId: string, statement: string): Promise<{ hasRole: number; hasAnyRole: number }> {
  return sql.begin(async (tx) => {
    const counts = async () => {
      const [calls] = await tx<{ has_role: number; has_any_role: number }[]>`
        select coalesce(pg_stat_get_xact_function_calls('public.has_role(public.app_role)'::regprocedure), 0)::int as has_role,
               coalesce(pg_stat_get_xact_function_calls('public.has_any_role(public.app_role[])'::regprocedure), 0)::int as has_any_role`;
      return calls;
    };
    await tx`set local track_functions = 'all'`;
    const before = await counts();
    const claims = JSON.stringify({ sub: userId, role: 'authenticated', aud: 'authenticated' });
    await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${claims}, true)`;
    await tx.unsafe(statement);
    await tx`reset role`;
    const after = await counts();
    return { hasRole: after.has_role - before.has_role, hasAnyRole: after.has_any_role - before.has_any_role };
  });
}

describe('a statement asks for the caller’s roles once', () => {
  it('no policy asks for a role more than once in its USING or its WITH CHECK', async () => {
    const policies = await sql<{ name: string; qual: string | null; with_check: string | null }[]>`
      select tablename || ': ' || policyname as name, qual, with_check from pg_policies where schemaname = 'public'`;
    const checked = policies.filter((p) => roleChecksIn(p.qual) + roleChecksIn(p.with_check) > 0);
    expect(checked.length).toBeGreaterThanOrEqual(TABLES_OPEN_TO_EVERY_ROLE.length);
    const asking = checked.filter((p) => roleChecksIn(p.qual) > 1 || roleChecksIn(p.with_check) > 1).map((p) => p.name);
    expect(asking).toEqual([]);
  });

  it('an admin, an editor and a viewer each make one lookup reading a table open to all three', async () => {
    // A policy's check runs when a row is read: every table gets one (the rollups from this event).
    const websiteId = await createWebsite(sql, 'Role lookups');
    await insertEvents(sql, websiteId, [
      {
        page: '/', session: 'role-lookups-session', visitor: 'role-lookups-visitor', device: 'mobile', at: new Date().toISOString(),
        referrerHost: 'example.org', country: 'DE', campaign: { source: 'news', medium: 'mail', name: 'autumn' },
      },
    ]);
    const users = await Promise.all((['admin', 'editor', 'viewer'] as const).map(async (role) => {
      const user = await createAuthUser(sql);
      await grantRole(sql, user.id, role);
      return { role, id: user.id };
    }));
    for (const table of TABLES_OPEN_TO_EVERY_ROLE) {
      const column = table === 'websites' ? 'id' : 'website_id';
      const [{ rows }] = await sql.unsafe(`select count(*)::int as rows from public.${table} where ${column} = $1`, [websiteId]);
      expect({ table, hasRows: rows > 0 }).toEqual({ table, hasRows: true });
      for (const user of users) {
        const calls = await roleChecksOf(user.id, `select count(*) from public.${table}`);
        expect({ table, role: user.role, ...calls }).toEqual({ table, role: user.role, hasRole: 0, hasAnyRole: 1 });
      }
    }
  });
});

describe('has_any_role', () => {
  it('answers whether the caller holds at least one of the roles, for the caller only', async () => {
    const editor = await createAuthUser(sql);
    await grantRole(sql, editor.id, 'editor');
    const other = await createAuthUser(sql);
    const ask = (userId: string | null, roles: string) =>
      asUser(sql, userId, async (tx) => (await tx.unsafe(`select public.has_any_role(${roles}) as yes`))[0].yes);
    expect(await ask(editor.id, `'viewer', 'editor', 'admin'`)).toBe(true);
    expect(await ask(editor.id, `'editor'`)).toBe(true);
    expect(await ask(editor.id, `'viewer', 'admin'`)).toBe(false);
    expect(await ask(other.id, `'viewer', 'editor', 'admin'`)).toBe(false);
    expect(await ask(null, `'viewer', 'editor', 'admin'`)).toBe(false);
  });
});
