import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type postgres from 'postgres';
import { signLegacyAdminToken } from '../../src/lib/tokens.ts';
import { TEST_ADMIN_JWT_SECRET } from './app.ts';

// Helpers for the websites and analytics tests: websites made through the
// API (so each test owns its rows and its API key), and events written
// straight into Postgres with chosen timestamps, as a bulk load would.

export const adminToken = () => signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, `ops-${randomUUID().slice(0, 8)}`);

/** Every table that holds a website's analytics: its events and every rollup of them. */
export const ANALYTICS_TABLES: string[] = [
  'analytics_events',
  'analytics_daily_totals',
  'analytics_daily_pages',
  'analytics_daily_referrers',
  'analytics_distinct_days',
  'analytics_daily_distinct',
  'analytics_session_days',
  'analytics_daily_sessions',
  'analytics_dimension_days',
  'analytics_daily_dimensions',
];

export interface TestWebsite {
  id: string;
  apiKey: string;
}

export async function createWebsite(app: FastifyInstance, name = 'Test site'): Promise<TestWebsite> {
  const response = await app.inject({
    method: 'POST',
    url: '/api/websites',
    headers: { authorization: `Bearer ${await adminToken()}` },
    payload: { name, domain: `${randomUUID().slice(0, 8)}.example.test` },
  });
  if (response.statusCode !== 201) throw new Error(`website not created: ${response.statusCode} ${response.body}`);
  const { id, apiKey } = response.json().data;
  return { id, apiKey };
}

export interface FixtureEvent {
  type?: 'page_view' | 'click' | 'form_submit' | 'custom';
  page: string;
  session: string;
  visitor: string;
  device: 'desktop' | 'mobile' | 'tablet';
  /** ISO timestamp (UTC). */
  at: string;
  referrerHost?: string;
  loadTime?: number;
  country?: string;
  campaign?: { source: string; medium: string; name: string };
}

/** One INSERT for all `events` (the rollup trigger runs once for the statement). */
export async function insertEvents(sql: postgres.Sql, websiteId: string, events: FixtureEvent[]): Promise<void> {
  if (events.length === 0) return;
  const column = <T>(pick: (event: FixtureEvent) => T) => events.map(pick);
  await sql`
    insert into public.analytics_events
      (id, website_id, event_type, page, referrer, referrer_host, user_agent, device_type, session_id, visitor_id,
       country, utm_source, utm_medium, utm_campaign, metadata, created_at)
    select gen_random_uuid(), ${websiteId}, e.type, e.page, e.host, e.host, 'fixture', e.device, e.session, e.visitor,
           e.country, e.utm_source, e.utm_medium, e.utm_campaign, e.metadata::jsonb, e.at
      from unnest(${column((e) => e.type ?? 'page_view')}::text[], ${column((e) => e.page)}::text[],
                  ${column((e) => e.referrerHost ?? null)}::text[], ${column((e) => e.device)}::text[],
                  ${column((e) => e.session)}::text[], ${column((e) => e.visitor)}::text[],
                  ${column((e) => e.country ?? null)}::text[], ${column((e) => e.campaign?.source ?? null)}::text[],
                  ${column((e) => e.campaign?.medium ?? null)}::text[], ${column((e) => e.campaign?.name ?? null)}::text[],
                  ${column((e) => JSON.stringify(e.loadTime === undefined ? {} : { loadTime: e.loadTime }))}::text[],
                  ${column((e) => e.at)}::timestamptz[])
        as e (type, page, host, device, session, visitor, country, utm_source, utm_medium, utm_campaign, metadata, at)`;
}

/** `count` events over 90 days, 3000 sessions and 5000 visitors, so every rollup table has rows. */
export const insertEventsInBulk = (sql: postgres.Sql, websiteId: string, count: number) => sql`
  insert into public.analytics_events
    (id, website_id, event_type, page, referrer_host, user_agent, device_type, session_id, visitor_id, country, utm_source, created_at)
  select gen_random_uuid(), ${websiteId}, 'page_view', '/p' || (g % 50), 'ref' || (g % 7) || '.example.test', 'fixture',
         (array['desktop', 'mobile', 'tablet'])[1 + g % 3], 's' || (g % 3000), 'v' || (g % 5000), 'DE', 'newsletter',
         timestamptz '2026-01-01' + (g % 90) * interval '1 day' + (g % 1000) * interval '1 second'
    from generate_series(1, ${count}) g`;
