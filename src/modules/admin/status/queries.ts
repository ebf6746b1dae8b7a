import type { Tx } from '../../../plugins/db.ts';

/** Whether the caller of the transaction holds the admin role (row-level security's own test). */
export async function holdsAdminRole(tx: Tx): Promise<boolean> {
  const [row] = await tx<{ admin: boolean }[]>`select public.has_role('admin') as admin`;
  return row.admin;
}
