import type { Tx } from '../../plugins/db.ts';
import type { AppRole } from '../../lib/roles.ts';
import type { ListUsersQuery, User } from './schemas.ts';

// One query per function, named after what it returns. Each runs in the
// caller's transaction (plugins/db.ts: asActor, or readAtOnceAsActor), so
// row-level security decides which profiles and roles are visible: a user sees
// their own, an admin all.

interface UserRow {
  id: string;
  email: string;
  name: string;
  created_at: Date;
  last_login: Date | null;
  roles: AppRole[];
}

const toUser = (row: UserRow): User => ({
  id: row.id,
  email: row.email,
  name: row.name,
  createdAt: row.created_at.toISOString(),
  lastLogin: row.last_login?.toISOString() ?? null,
  roles: row.roles,
});

const rolesOf = (tx: Tx) => tx`
  coalesce((select array_agg(r.role::text order by r.role) from public.user_roles r where r.user_id = p.id), '{}') as roles`;

export async function getUserById(tx: Tx, id: string): Promise<User | undefined> {
  const [row] = await tx<UserRow[]>`
    select p.id, p.email, p.name, p.created_at, p.last_login, ${rolesOf(tx)}
      from public.profiles p where p.id = ${id}`;
  return row && toUser(row);
}

export async function getUserByEmail(tx: Tx, email: string): Promise<User | undefined> {
  const [row] = await tx<UserRow[]>`
    select p.id, p.email, p.name, p.created_at, p.last_login, ${rolesOf(tx)}
      from public.profiles p where lower(p.email) = lower(${email})
     order by p.created_at limit 1`;
  return row && toUser(row);
}

/** The id of the renamed profile, or undefined when none was visible to update. */
export async function updateUserName(tx: Tx, id: string, name: string): Promise<string | undefined> {
  const [row] = await tx<{ id: string }[]>`update public.profiles set name = ${name} where id = ${id} returning id`;
  return row?.id;
}

export async function listUsers(tx: Tx, { search, limit, offset }: ListUsersQuery): Promise<{ users: User[]; total: number }> {
  const pattern = search ? `%${search.replace(/[\\%_]/g, (c) => `\\${c}`)}%` : null;
  const rows = await tx<(UserRow & { total: string })[]>`
    select p.id, p.email, p.name, p.created_at, p.last_login, ${rolesOf(tx)}, count(*) over () as total
      from public.profiles p
     where ${pattern}::text is null or p.email ilike ${pattern} or p.name ilike ${pattern}
     order by p.created_at desc, p.id
     limit ${limit} offset ${offset}`;
  const total = rows.length > 0 ? Number(rows[0].total) : offset > 0 ? await countUsers(tx, pattern) : 0;
  return { users: rows.map(toUser), total };
}

async function countUsers(tx: Tx, pattern: string | null): Promise<number> {
  const [row] = await tx<{ total: string }[]>`
    select count(*) as total from public.profiles p
     where ${pattern}::text is null or p.email ilike ${pattern} or p.name ilike ${pattern}`;
  return Number(row.total);
}
