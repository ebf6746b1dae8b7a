import type { Database } from './db.ts';

// The data path must not log in as the schema's owner or a superuser: then
// nothing it ran, however crafted, could change the schema or switch RLS off.

/**
 * Why DATABASE_URL's login is too strong for the data path (a superuser, or
 * the owner of the schema), or undefined. A database that does not answer
 * within 2 s is not judged here: /health reports it.
 */
export async function ownerOrSuperuserLogin(db: Database): Promise<string | undefined> {
  const facts = db.sql<{ login: string; superuser: boolean; owner: boolean }[]>`
    select session_user as login,
           coalesce((select rolsuper from pg_roles where rolname = session_user), false) as superuser,
           pg_has_role(session_user, (select nspowner from pg_namespace where nspname = 'public'), 'MEMBER') as owner`;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), 2_000)));
  facts.catch(() => {});
  const rows = await Promise.race([facts.catch(() => undefined), late]);
  clearTimeout(timer);
  const row = rows?.[0];
  if (!row || (!row.superuser && !row.owner)) return undefined;
  return (
    `DATABASE_URL connects as ${row.login}, ${row.superuser ? 'a superuser' : 'the owner of the schema'}; ` +
    'connect as a login role that can only switch to anon, authenticated and service_role (README, Least privilege)'
  );
}
