import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../config.ts';
import { SERVICE_UNAVAILABLE_RETRY_AFTER_S } from '../../lib/errors.ts';
import { createHealthService } from './health.ts';
import { HealthFailureSchema, HealthResponseSchema, MetricsResponseSchema } from './schemas.ts';
import { noStore } from '../../plugins/security.ts';

// /api/admin: admin role or the legacy admin token on every route. Stored
// logs (/api/admin/logs) and the user list (/api/admin/users) belong to the
// logs and users modules; app.ts mounts them under this prefix.
const adminRoutes: FastifyPluginAsyncZod<{ config: Config; version: string }> = async (app, { config, version }) => {
  app.addHook('onRequest', noStore);
  app.addHook('onRequest', app.requireRole('admin'));
  const health = createHealthService({ db: app.db, config, version, startedAt: app.metrics.startedAt, outbox: app.feedbackOutbox, pingRateLimitStore: app.pingRateLimitStore });
  const security = [{ bearer: [] }];
  const tags = ['admin'];

  app.get(
    '/health',
    {
      schema: {
        tags,
        security,
        summary: 'System, database, auth and e-mail status (admin)',
        response: { 200: HealthResponseSchema.describe('Every dependency answers: the report'), 503: HealthFailureSchema },
      },
    },
    async function reportHealth(request, reply) {
      const report = await health.checkHealth();
      if (report.status === 'ok') return { success: true as const, data: report };
      request.log.error({ database: report.database, auth: report.auth }, 'admin health: a dependency is down');
      return reply
        .status(503)
        .header('retry-after', SERVICE_UNAVAILABLE_RETRY_AFTER_S)
        .send({ success: false as const, error: 'Service unavailable', statusCode: 503 as const, data: report });
    },
  );

  app.get(
    '/metrics',
    { schema: { tags, security, summary: 'Request and process metrics since start (admin)', response: { 200: MetricsResponseSchema.describe('The metrics') } } },
    async function reportMetrics() {
      return { success: true as const, data: await app.metrics.snapshot() };
    },
  );
};

export default adminRoutes;
