import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';

const HealthSchema = z.object({
  success: z.boolean(),
  status: z.enum(['ok', 'error']),
  timestamp: z.iso.datetime(),
  error: z.string().optional(),
  statusCode: z.number().int().optional(),
});

// Public liveness and readiness: answers 503 when Postgres does not.
const healthRoutes: FastifyPluginAsyncZod = async (app) => {
  app.get(
    '/health',
    {
      config: { rateLimit: false },
      schema: { tags: ['health'], summary: 'Service health', response: { 200: HealthSchema, 503: HealthSchema } },
    },
    async function reportLiveness(request, reply) {
      const timestamp = new Date().toISOString();
      try {
        await app.db.ping();
        return { success: true, status: 'ok' as const, timestamp };
      } catch (error) {
        request.log.error({ err: error }, 'health check: database unreachable');
        return reply
          .status(503)
          .send({ success: false, status: 'error' as const, timestamp, error: 'Database unavailable', statusCode: 503 });
      }
    },
  );
};

export default healthRoutes;
