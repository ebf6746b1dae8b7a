import type { ElevatedSql, Tx } from '../../plugins/db.ts';
import type { Website } from './schemas.ts';

// One query per function, named after what it returns. Each takes the caller's
// transaction (`asActor` or `readAtOnceAsActor`), so row-level security
// decides; the elevated ones say so in their names. A website whose deletion
// has begun is left out by row-level security, and by the queries themselves
// for the legacy admin token, whose service role bypasses it.

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
     where deletion_started_at is null
     order by created_at desc, id
     limit ${limit} offset ${offset}`;
  return rows.map(toWebsite);
}

export async function getWebsiteCount(tx: Tx): Promise<number> {
  const [row] = await tx<{ total: string }[]>`select count(*) as total from public.websites where deletion_started_at is null`;
  return Number(row.total);
}

export async function getWebsite(tx: Tx, id: string): Promise<Website | undefined> {
  const [row] = await tx<WebsiteRow[]>`select ${tx(COLUMNS)} from public.websites where id = ${id} and deletion_started_at is null`;
  return row ? toWebsite(row) : undefined;
}

export async function updateWebsite(tx: Tx, id: string, patch: WebsitePatch): Promise<Website | undefined> {
  const [row] = await tx<WebsiteRow[]>`
    update public.websites
       set name = coalesce(${patch.name ?? null}, name),
           domain = coalesce(${patch.domain ?? null}, domain),
           settings = coalesce(${json(patch.settings)}::text::jsonb, settings),
           metadata = coalesce(${json(patch.metadata)}::text::jsonb, metadata)
     where id = ${id} and deletion_started_at is null
    returning ${tx(COLUMNS)}`;
  return row ? toWebsite(row) : undefined;
}

/** Puts a new API key (its hash and display prefix) on a website not being deleted, as the caller; undefined when there is none. */
export async function replaceApiKey(tx: Tx, id: string, key: { hash: Buffer; prefix: string }): Promise<Website | undefined> {
  const [row] = await tx<WebsiteRow[]>`
    update public.websites
       set api_key_hash = ${key.hash}, api_key_prefix = ${key.prefix}
     where id = ${id} and deletion_started_at is null
    returning ${tx(COLUMNS)}`;
  return row ? toWebsite(row) : undefined;
}

/**
 * Marks the website for deletion, as the caller (admins only): from the
 * commit on it is hidden and its key opens nothing. False when there is no
 * such website; true as well when its deletion began earlier.
 */
export async function beginWebsiteDeletion(tx: Tx, id: string): Promise<boolean> {
  const [row] = await tx<{ begun: boolean }[]>`select public.begin_website_deletion(${id}) as begun`;
  return row.begun;
}

/**
 * Elevated: deletes one batch of a marked website's rows, the website row
 * last, in one short transaction; how many rows went, 0 once it is gone.
 * Left pending so the service can bound it (migration 20261124000100).
 */
export function deleteWebsiteBatchElevated(sql: ElevatedSql, id: string, batchSize: number) {
  return sql<{ deleted: number }[]>`select public.delete_website_batch(${id}, ${batchSize}) as deleted`;
}

/** Elevated: the websites whose deletion began and has not finished (a process stopped during it). */
export async function selectWebsiteIdsBeingDeletedElevated(sql: ElevatedSql): Promise<string[]> {
  const rows = await sql<{ id: string }[]>`
    select id from public.websites where deletion_started_at is not null order by deletion_started_at, id`;
  return rows.map((row) => row.id);
}

/**
 * Elevated: the key is the credential, so the caller need not see websites
 * otherwise; a website being deleted opens for no key. Left pending (map with
 * toWebsite) so the service can bound it.
 */
export function selectWebsiteByApiKeyHashElevated(sql: ElevatedSql, hash: Buffer) {
  return sql<WebsiteRow[]>`select ${sql(COLUMNS)} from public.websites where api_key_hash = ${hash} and deletion_started_at is null`;
}
