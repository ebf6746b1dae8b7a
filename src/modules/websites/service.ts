import { notFound } from '../../lib/errors.ts';
import type { Database, DbActor } from '../../plugins/db.ts';
import { generateApiKey, hashApiKey, isWellFormedApiKey } from './api-keys.ts';
import {
  deleteWebsite,
  getWebsite,
  getWebsiteByApiKeyHashElevated,
  getWebsiteCount,
  getWebsitePage,
  insertWebsite,
  updateWebsite,
} from './queries.ts';
import type { PaginationQuery } from '../../lib/schemas.ts';
import type { CreateWebsiteBody, UpdateWebsiteBody, Website } from './schemas.ts';

export const websiteNotFound = () => notFound('Website not found');

export function createWebsitesService({ db }: { db: Database }) {
  return {
    /** The new website with its API key, shown in full only here. */
    async create(actor: DbActor, body: CreateWebsiteBody): Promise<Website & { apiKey: string }> {
      const apiKey = generateApiKey();
      const website = await db.asActor(actor, (tx) =>
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
    },

    async list(actor: DbActor, page: PaginationQuery): Promise<{ data: Website[]; total: number }> {
      return db.asActor(actor, async (tx) => {
        const [data, total] = await Promise.all([getWebsitePage(tx, page), getWebsiteCount(tx)]);
        return { data, total };
      });
    },

    async get(actor: DbActor, id: string): Promise<Website> {
      const website = await db.asActor(actor, (tx) => getWebsite(tx, id));
      if (!website) throw websiteNotFound();
      return website;
    },

    async update(actor: DbActor, id: string, patch: UpdateWebsiteBody): Promise<Website> {
      const website = await db.asActor(actor, (tx) => updateWebsite(tx, id, patch));
      if (!website) throw websiteNotFound();
      return website;
    },

    async remove(actor: DbActor, id: string): Promise<void> {
      const deleted = await db.asActor(actor, (tx) => deleteWebsite(tx, id));
      if (!deleted) throw websiteNotFound();
    },

    /** Elevated: the key itself is the credential. Anything else is simply not found. */
    async findByApiKeyElevated(apiKey: string): Promise<Website | undefined> {
      if (!isWellFormedApiKey(apiKey)) return undefined;
      return db.asActor({ role: 'service_role' }, (tx) => getWebsiteByApiKeyHashElevated(tx, hashApiKey(apiKey)));
    },
  };
}

export type WebsitesService = ReturnType<typeof createWebsitesService>;
