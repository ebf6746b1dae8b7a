import { generateApiKey, hashApiKey, isWellFormedApiKey } from '../../lib/api-keys.ts';
import { notFound } from '../../lib/errors.ts';
import type { PaginationQuery } from '../../lib/schemas.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database } from '../../plugins/db.ts';
import {
  deleteWebsite,
  getWebsite,
  getWebsiteCount,
  getWebsitePage,
  insertWebsite,
  selectWebsiteByApiKeyHashElevated,
  toWebsite,
  updateWebsite,
} from './queries.ts';
import type { CreateWebsiteBody, UpdateWebsiteBody, Website } from './schemas.ts';

// Websites and their API keys. Every operation runs as its caller under
// row-level security, except the lookup by key, where the key is the credential.

export const websiteNotFound = () => notFound('Website not found');

export function createWebsitesService({ db }: { db: Database }) {
  /** The new website with its API key, shown in full only here. */
  async function createWebsite(caller: Caller, body: CreateWebsiteBody): Promise<Website & { apiKey: string }> {
    const apiKey = generateApiKey();
    const website = await db.asActor(dbActorOf(caller), (tx) =>
      insertWebsite(tx, {
        name: body.name,
        domain: body.domain,
        settings: body.settings ?? {},
        metadata: body.metadata ?? {},
        apiKeyHash: apiKey.hash,
        apiKeyPrefix: apiKey.prefix,
      }),
    );
    return { ...website, apiKey: apiKey.key };
  }

  async function listWebsites(caller: Caller, page: PaginationQuery): Promise<{ data: Website[]; total: number }> {
    return db.readAtOnceAsActor(dbActorOf(caller), async (tx) => {
      const [data, total] = await Promise.all([getWebsitePage(tx, page), getWebsiteCount(tx)]);
      return { data, total };
    });
  }

  async function findWebsite(caller: Caller, id: string): Promise<Website> {
    const website = await db.readAtOnceAsActor(dbActorOf(caller), (tx) => getWebsite(tx, id));
    if (!website) throw websiteNotFound();
    return website;
  }

  async function changeWebsite(caller: Caller, id: string, patch: UpdateWebsiteBody): Promise<Website> {
    const website = await db.asActor(dbActorOf(caller), (tx) => updateWebsite(tx, id, patch));
    if (!website) throw websiteNotFound();
    return website;
  }

  async function removeWebsite(caller: Caller, id: string): Promise<void> {
    const deleted = await db.asActor(dbActorOf(caller), (tx) => deleteWebsite(tx, id));
    if (!deleted) throw websiteNotFound();
  }

  /** Elevated: the key itself is the credential. Anything else is simply not found. */
  async function findWebsiteByApiKeyElevated(apiKey: string): Promise<Website> {
    if (!isWellFormedApiKey(apiKey)) throw websiteNotFound();
    const [row] = await db.bounded(selectWebsiteByApiKeyHashElevated(db.sql, hashApiKey(apiKey)));
    if (!row) throw websiteNotFound();
    return toWebsite(row);
  }

  return { createWebsite, listWebsites, findWebsite, changeWebsite, removeWebsite, findWebsiteByApiKeyElevated };
}

export type WebsitesService = ReturnType<typeof createWebsitesService>;
