import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { Config } from '../../config.ts';
import type { Database } from '../../plugins/db.ts';

// Dependency checks for GET /api/admin/health and the /admin/status stream.
// A dependency that is `down` makes the whole answer 503; `not_configured`
// (no auth server, no mail provider set) is a choice, not an outage.

const PROBE_TIMEOUT_MS = 2_000;

export const HealthReportSchema = z.object({
  status: z.enum(['ok', 'error']),
  timestamp: z.iso.datetime(),
  uptime: z.number().describe('seconds since the app started'),
  version: z.string(),
  database: z.object({ status: z.enum(['up', 'down']), latencyMs: z.number().nullable() }),
  auth: z.object({ status: z.enum(['up', 'down', 'not_configured']), latencyMs: z.number().nullable() }),
  email: z.object({
    status: z.enum(['up', 'failing', 'not_configured', 'unknown']),
    provider: z.enum(['resend', 'smtp']).nullable(),
    pendingOutbox: z.number().int().nullable(),
  }),
  rateLimitStore: z
    .object({ status: z.enum(['up', 'down', 'not_configured']), latencyMs: z.number().nullable() })
    .describe('Redis, which instances share rate-limit counts through; down, each instance counts alone (not an outage: no 503)'),
});
export type HealthReport = z.infer<typeof HealthReportSchema>;

const round = (ms: number) => Math.round(ms * 100) / 100;

async function checkAuthServer(config: Config): Promise<HealthReport['auth']> {
  if (!config.SUPABASE_URL) return { status: 'not_configured', latencyMs: null };
  const started = performance.now();
  try {
    const response = await fetch(new URL('auth/v1/health', config.SUPABASE_URL.replace(/\/?$/, '/')), {
      headers: config.SUPABASE_ANON_KEY ? { apikey: config.SUPABASE_ANON_KEY } : {},
      signal: AbortSignal.timeout(PROBE_TIMEOUT_MS),
    });
    await response.body?.cancel();
    return { status: response.ok ? 'up' : 'down', latencyMs: round(performance.now() - started) };
  } catch {
    return { status: 'down', latencyMs: null };
  }
}

export interface HealthServiceDeps {
  db: Database;
  config: Config;
  version: string;
  /** When the app started, for the uptime. */
  startedAt: Date;
  /** The notification outbox (feedback/outbox), asked for its backlog and mail provider. */
  outbox: Pick<FastifyInstance['feedbackOutbox'], 'backlog' | 'provider'>;
  /** The rate-limit store's round trip (plugins/rate-limit.ts); undefined when counts stay in the process. */
  pingRateLimitStore: FastifyInstance['pingRateLimitStore'];
}

async function checkRateLimitStore(ping: HealthServiceDeps['pingRateLimitStore']): Promise<HealthReport['rateLimitStore']> {
  const pinged = ping();
  if (!pinged) return { status: 'not_configured', latencyMs: null };
  return pinged.then(
    (ms) => ({ status: 'up' as const, latencyMs: round(ms) }),
    () => ({ status: 'down' as const, latencyMs: null }),
  );
}

export function createHealthService({ db, config, version, startedAt, outbox, pingRateLimitStore }: HealthServiceDeps) {
  async function checkHealth(): Promise<HealthReport> {
    const [database, auth, backlog, rateLimitStore] = await Promise.all([
      db.ping(PROBE_TIMEOUT_MS).then(
        (ms) => ({ status: 'up' as const, latencyMs: round(ms) }),
        () => ({ status: 'down' as const, latencyMs: null }),
      ),
      checkAuthServer(config),
      outbox.backlog().catch(() => undefined),
      checkRateLimitStore(pingRateLimitStore),
    ]);
    const { provider } = outbox;
    const emailStatus = backlog === undefined ? 'unknown' : !provider ? 'not_configured' : backlog.failing > 0 ? 'failing' : 'up';
    return {
      status: database.status === 'down' || auth.status === 'down' ? 'error' : 'ok',
      timestamp: new Date().toISOString(),
      uptime: Math.round((Date.now() - startedAt.getTime()) / 100) / 10,
      version,
      database,
      auth,
      email: { status: emailStatus, provider, pendingOutbox: backlog?.owed ?? null },
      rateLimitStore,
    };
  }

  /** The last report for up to `maxAgeMs`, so a dashboard refreshing every second does not probe every second. */
  function cachedHealthCheck(maxAgeMs = 5_000) {
    let last: { at: number; report: Promise<HealthReport> } | undefined;
    return () => {
      if (!last || Date.now() - last.at > maxAgeMs) last = { at: Date.now(), report: checkHealth() };
      return last.report;
    };
  }

  return { checkHealth, cachedHealthCheck };
}
