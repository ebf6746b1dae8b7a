import type { ElevatedSql, Tx } from '../../plugins/db.ts';
import type { Website } from './schemas.ts';

// One query per function, named after what it returns. Each takes the caller's
// transaction (`asActor` or `readAtOnceAsActor`), so row-level security
// decides; the one elevated lookup says so in its name.

interface WebsiteRow {
  id: string;
  name: string;
  domain: string;
  api_key_prefix: string;
  settings: Record<string, unknown>;
  metadata: Record<string, unknown>;
  created_by: string | null;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = ['id', 'name', 'domain', 'api_key_prefix', 'settings', 'metadata', 'created_by', 'created_at', 'updated_at'];

export function toWebsite(row: WebsiteRow): Website {
  return {
    id: row.id,
    name: row.name,
    domain: row.domain,
    apiKeyPrefix: row.api_key_prefix,
    settings: row.settings,
    metadata: row.metadata,
    createdBy: row.created_by,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  };
}

export interface NewWebsiteRow {
  name: string;
  domain: string;
  settings: Record<string, unknown>;
  metadata: Record<string, unknown>;
  apiKeyHash: Buffer;
  apiKeyPrefix: string;
}

export interface WebsitePatch {
  name?: string;
  domain?: string;
  settings?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
}

const json = (value: Record<string, unknown> | undefined) => (value === undefined ? null : JSON.stringify(value));

/** The creator is the caller's auth user; null for the legacy admin token, which has none. */
export async function insertWebsite(tx: Tx, row: NewWebsiteRow): Promise<Website> {
  const [created] = await tx<WebsiteRow[]>`
    insert into public.websites (name, domain, settings, metadata, api_key_hash, api_key_prefix, created_by)
    values (${row.name}, ${row.domain}, ${json(row.settings)}::text::jsonb, ${json(row.metadata)}::text::jsonb,
            ${row.apiKeyHash}, ${row.apiKeyPrefix}, (select auth.uid()))
    returning ${tx(COLUMNS)}`;
  return toWebsite(created);
}

export async function getWebsitePage(tx: Tx, { limit, offset }: { limit: number; offset: number }): Promise<Website[]> {
  const rows = await tx<WebsiteRow[]>`
    select ${tx(COLUMNS)} from public.websites
     order by created_at desc, id
     limit ${limit} offset ${offset}`;
  return rows.map(toWebsite);
}

export async function getWebsiteCount(tx: Tx): Promise<number> {
  const [row] = await tx<{ total: string }[]>`select count(*) as total from public.websites`;
  return Number(row.total);
}

export async function getWebsite(tx: Tx, id: string): Promise<Website | undefined> {
  const [row] = await tx<WebsiteRow[]>`select ${tx(COLUMNS)} from public.websites where id = ${id}`;
  return row ? toWebsite(row) : undefined;
}

export async function updateWebsite(tx: Tx, id: string, patch: WebsitePatch): Promise<Website | undefined> {
  const [row] = await tx<WebsiteRow[]>`
    update public.websites
       set name = coalesce(${patch.name ?? null}, name),
           domain = coalesce(${patch.domain ?? null}, domain),
           settings = coalesce(${json(patch.settings)}::text::jsonb, settings),
           metadata = coalesce(${json(patch.metadata)}::text::jsonb, metadata)
     where id = ${id}
    returning ${tx(COLUMNS)}`;
  return row ? toWebsite(row) : undefined;
}

/** Its events and rollups go with it (foreign keys cascade). */
export async function deleteWebsite(tx: Tx, id: string): Promise<boolean> {
  const rows = await tx`delete from public.websites where id = ${id} returning id`;
  return rows.length > 0;
}

/**
 * Elevated: the key is the credential, so the caller need not see websites
 * otherwise. Left pending (map with toWebsite) so the service can bound it.
 */
export function selectWebsiteByApiKeyHashElevated(sql: ElevatedSql, hash: Buffer) {
  return sql<WebsiteRow[]>`select ${sql(COLUMNS)} from public.websites where api_key_hash = ${hash}`;
}
