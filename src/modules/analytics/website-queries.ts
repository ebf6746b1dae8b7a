import type { ElevatedSql, Tx } from '../../plugins/db.ts';

// The analytics module's own reads of public.websites: whether a website is
// there for the caller, and which website an API key opens. A website whose
// deletion has begun is not there (row-level security hides it from users;
// the condition is for the legacy admin token, whose service role does not).

export async function websiteExists(tx: Tx, websiteId: string): Promise<boolean> {
  const rows = await tx`select 1 from public.websites where id = ${websiteId} and deletion_started_at is null`;
  return rows.length > 0;
}

/** Elevated: the key is the credential; a website being deleted opens for no key. Pending, so the service can bound it. */
export function selectWebsiteIdByApiKeyHashElevated(sql: ElevatedSql, hash: Buffer) {
  return sql<{ id: string }[]>`select id from public.websites where api_key_hash = ${hash} and deletion_started_at is null`;
}
