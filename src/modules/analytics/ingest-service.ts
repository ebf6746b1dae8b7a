import type { FastifyBaseLogger } from 'fastify';
import { badRequest } from '../../lib/errors.ts';
import { isUuidText } from '../../lib/schemas.ts';
import type { AnalyticsBatcher } from './batcher.ts';
import { readCampaign } from './campaign.ts';
import { canonicalPath, createVisitorIds, describeUserAgent, referrerParts } from './enrich.ts';
import type { CountryLookup } from './geo.ts';
import { uuidv7 } from './ids.ts';
import { PAGE_MAX_BYTES, type RecordEventBody } from './schemas.ts';
import { websiteNotFound } from './service.ts';

// Ingestion (POST /api/analytics): an event is enriched (device, page and
// referrer path in one spelling, referrer cut to its origin and path, its
// host, campaign, country, visitor hash) and stored through the group commit.
// The client's IP goes no further than the country and the hash.

export type RecordResult = { kind: 'bot' } | { kind: 'stored'; id: string; timestamp: string };

export function createIngestService({
  batcher,
  saltSecret,
  countryOf,
}: {
  batcher: AnalyticsBatcher;
  saltSecret: string;
  /** Country of a client IP; the IP goes no further than this call and the visitor hash. */
  countryOf: CountryLookup;
}) {
  const visitorId = createVisitorIds(saltSecret);

  return {
    /**
     * Stores one event through the group commit; resolves once it is committed.
     * `log`: the request's, so a refusal's line carries its request id.
     */
    async record(body: RecordEventBody, client: { ip: string }, log: FastifyBaseLogger): Promise<RecordResult> {
      const agent = describeUserAgent(body.userAgent, body.touchScreen);
      if (agent.bot) return { kind: 'bot' };
      if (!isUuidText(body.websiteId)) throw websiteNotFound();
      // One website, one spelling: the visitor hash and the batch's rollups key on this text.
      const websiteId = body.websiteId.toLowerCase();
      const at = new Date();
      const timestamp = at.toISOString();
      const id = uuidv7(at.getTime());
      const { page: pageAsSent, campaign } = readCampaign(body.page);
      // One spelling per page (escapes, NFC), so the rollups count it once.
      const page = canonicalPath(pageAsSent, PAGE_MAX_BYTES);
      const referrer = referrerParts(body.referrer);
      const outcome = await batcher.record({
        id,
        websiteId,
        eventType: body.eventType,
        page,
        referrer: referrer.stored,
        referrerHost: referrer.host,
        userAgent: body.userAgent,
        deviceType: agent.device,
        sessionId: body.sessionId,
        userId: body.userId ?? null,
        visitorId: visitorId({ userId: body.userId, websiteId, ip: client.ip, userAgent: body.userAgent, at }),
        country: countryOf(client.ip),
        ...campaign,
        metadata: body.metadata ?? {},
        createdAt: timestamp,
      });
      if (outcome === 'unknown-website') throw websiteNotFound();
      if (typeof outcome === 'object') {
        // Validation let through what the table refuses: a gap to close, so the line is stored (warn), not counted away.
        log.warn({ ...outcome.refused, eventId: id, websiteId }, 'analytics event refused by the database; its request gets 400');
        throw badRequest('Analytics event was refused by the database');
      }
      return { kind: 'stored', id, timestamp };
    },
  };
}
