import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../config.ts';
import { actorFor, callerOf } from '../../plugins/auth.ts';
import { usersService } from '../users/service.ts';
import { ListUsersQuerySchema } from '../users/schemas.ts';
import { checkHealth } from './health.ts';
import { insertClientLogEntry, listLogEntries } from './logs-queries.ts';
import {
  CreatedLogResponseSchema,
  CreateLogBodySchema,
  HealthFailureSchema,
  HealthResponseSchema,
  ListLogsQuerySchema,
  LogsResponseSchema,
  MetricsResponseSchema,
  UsersResponseSchema,
} from './schemas.ts';

// /api/admin: admin role or the legacy admin token on every route.
const adminRoutes: FastifyPluginAsyncZod<{ config: Config; version: string }> = async (app, { config, version }) => {
  app.addHook('onRequest', app.requireRole('admin'));
  const users = usersService(app);
  const security = [{ bearer: [] }];
  const tags = ['admin'];

  app.get(
    '/health',
    { schema: { tags, security, summary: 'System, database, auth and e-mail status', response: { 200: HealthResponseSchema, 503: HealthFailureSchema } } },
    async (request, reply) => {
      const report = await checkHealth(app, config, version);
      if (report.status === 'ok') return { success: true as const, data: report };
      request.log.error({ database: report.database, auth: report.auth }, 'admin health: a dependency is down');
      return reply.status(503).send({ success: false as const, error: 'Service unavailable', statusCode: 503 as const, data: report });
    },
  );

  app.get(
    '/metrics',
    { schema: { tags, security, summary: 'Request and process metrics since start', response: { 200: MetricsResponseSchema } } },
    async () => ({ success: true as const, data: await app.metrics.snapshot() }),
  );

  app.get(
    '/logs',
    { schema: { tags, security, summary: 'Stored log entries, newest first', querystring: ListLogsQuerySchema, response: { 200: LogsResponseSchema } } },
    async (request) => {
      const { entries, total } = await app.db.asActor(actorFor(request.caller), (tx) => listLogEntries(tx, request.query));
      return { success: true as const, data: entries, pagination: { total, limit: request.query.limit, offset: request.query.offset } };
    },
  );

  app.post(
    '/logs',
    { schema: { tags, security, summary: 'Store a client-side log entry', body: CreateLogBodySchema, response: { 201: CreatedLogResponseSchema } } },
    async (request, reply) => {
      const caller = callerOf(request);
      const userId = caller.kind === 'user' ? caller.userId : null;
      const data = await app.db.asActor(actorFor(caller), (tx) => insertClientLogEntry(tx, request.body, { userId, requestId: request.id }));
      return reply.status(201).send({ success: true as const, message: 'Log entry stored', data });
    },
  );

  app.get(
    '/users',
    { schema: { tags, security, summary: 'Profiles with their roles', querystring: ListUsersQuerySchema, response: { 200: UsersResponseSchema } } },
    async (request) => {
      const { users: data, total } = await users.listUsersWithRoles(callerOf(request), request.query);
      return { success: true as const, data, pagination: { total, limit: request.query.limit, offset: request.query.offset } };
    },
  );
};

export default adminRoutes;
