import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { SERVICE_UNAVAILABLE_RETRY_AFTER_S } from '../../lib/errors.ts';

const HealthSchema = z.object({ success: z.literal(true), status: z.literal('ok'), timestamp: z.iso.datetime() });

const HealthFailureSchema = z.object({
  success: z.literal(false),
  status: z.literal('error').optional().describe('Absent when a server that is closing answers a request on a connection still open'),
  timestamp: z.iso.datetime().optional().describe('Absent as `status` is'),
  error: z.string(),
  statusCode: z.literal(503),
  requestId: z.string().optional().describe('With the error body only (a closing server): the id to quote when reporting it'),
});

/**
 * A failed check is logged at error, and stored in app_logs, at most once in
 * this long; the rest at debug, never stored. /health is public and not rate
 * limited, so a poller (a load balancer, a scanner) would otherwise fill the
 * stored log's queue while the database struggles, and its 1,000 lines would
 * crowd out the errors that say why; and it wrote an error line with a stack
 * to the process's output at every poll.
 */
const STORED_FAILURE_INTERVAL_MS = 60_000;

/**
 * Polls that arrive while a ping is under way, or within this long of its
 * answer, are answered with that ping's outcome. /health is public and not
 * rate limited (a load balancer polls it from few addresses), and each ping
 * took a connection of the pool every request shares: a flood of polls from
 * one address held the admin list at 0.8–1 s where a flood of any limited
 * route held it at 70 ms. Now a flood costs one query a second.
 */
const PING_REUSE_MS = 1_000;

// Public liveness and readiness: answers 503 when Postgres does not, and once
// a shutdown has begun (its readiness is withdrawn: plugins/graceful.ts).
const healthRoutes: FastifyPluginAsyncZod = async (app) => {
  let lastStoredFailure = -Infinity;
  let lastPing: Promise<unknown> | undefined;
  let lastPingSettled = Infinity;
  const sharedPing = () => {
    if (lastPing && performance.now() - lastPingSettled < PING_REUSE_MS) return lastPing;
    lastPingSettled = Infinity;
    const ping = app.db.ping().finally(() => {
      if (lastPing === ping) lastPingSettled = performance.now();
    });
    lastPing = ping;
    return ping;
  };
  app.get(
    '/health',
    {
      config: { rateLimit: false },
      schema: { tags: ['health'], summary: 'Service health', response: { 200: HealthSchema, 503: HealthFailureSchema } },
    },
    async function reportLiveness(request, reply) {
      const timestamp = new Date().toISOString();
      const unavailable = (error: string) =>
        reply.status(503).header('retry-after', SERVICE_UNAVAILABLE_RETRY_AFTER_S).send({ success: false as const, status: 'error' as const, timestamp, error, statusCode: 503 as const });
      if (app.readiness.withdrawn) return unavailable('Server is shutting down');
      try {
        await sharedPing();
        return { success: true as const, status: 'ok' as const, timestamp };
      } catch (error) {
        // Once a minute the error in full, stored too; between, each poll's own `http` line shows its 503.
        if (performance.now() - lastStoredFailure >= STORED_FAILURE_INTERVAL_MS) {
          lastStoredFailure = performance.now();
          request.log.error({ err: error }, 'health check: database unreachable');
        } else {
          request.log.debug({ err: error, persist: false }, 'health check: database unreachable');
        }
        return unavailable('Database unavailable');
      }
    },
  );
};

export default healthRoutes;
