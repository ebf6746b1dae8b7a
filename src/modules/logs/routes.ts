import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { callerOf } from '../../plugins/auth.ts';
import { noStore } from '../../plugins/security.ts';
import { CreatedLogResponseSchema, CreateLogBodySchema, ListLogsQuerySchema, LogsResponseSchema } from './schemas.ts';
import { createLogsService } from './service.ts';

// /api/admin/logs: admin role or the legacy admin token. The server's own
// entries arrive through the logger (worker.ts); clients post theirs here.
const logsRoutes: FastifyPluginAsyncZod = async (app) => {
  app.addHook('onRequest', noStore);
  app.addHook('onRequest', app.requireRole('admin'));
  const logs = createLogsService({ db: app.db });
  const security = [{ bearer: [] }];
  const tags = ['admin'];

  app.get(
    '/',
    { schema: { tags, security, summary: 'Stored log entries, newest first (admin)', querystring: ListLogsQuerySchema, response: { 200: LogsResponseSchema.describe('A page of entries') } } },
    async function listLogEntries(request) {
      const { entries, total } = await logs.listEntries(callerOf(request), request.query);
      return { success: true as const, data: entries, pagination: { total, limit: request.query.limit, offset: request.query.offset } };
    },
  );

  app.post(
    '/',
    {
      schema: {
        tags,
        security,
        // Not the public site's error reporter: a signed-in user without the admin role gets 403.
        summary: "Store a log entry from an admin's client, such as the dashboard (admin)",
        body: CreateLogBodySchema,
        response: { 201: CreatedLogResponseSchema.describe('Stored') },
      },
    },
    async function storeClientLogEntry(request, reply) {
      const data = await logs.storeClientEntry(callerOf(request), request.body, request.id);
      return reply.status(201).send({ success: true as const, message: 'Log entry stored', data });
    },
  );
};

export default logsRoutes;
