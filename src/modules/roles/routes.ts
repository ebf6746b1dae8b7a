import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { callerOf, requireCaller } from '../../plugins/auth.ts';
import { noStore } from '../../plugins/security.ts';
import { SetUserRolesBodySchema, UserRolesParamsSchema, UserRolesResponseSchema } from './schemas.ts';
import { createRolesService } from './service.ts';

// /api/userRoles: read a user's roles (self or admin), replace them (admin).
const rolesRoutes: FastifyPluginAsyncZod = async (app) => {
  app.addHook('onRequest', noStore);
  const roles = createRolesService({ db: app.db });
  const security = [{ bearer: [] }];
  const tags = ['user roles'];

  app.get(
    '/:userId',
    {
      onRequest: requireCaller(app),
      schema: { tags, security, summary: "A user's roles (self or admin)", params: UserRolesParamsSchema, response: { 200: UserRolesResponseSchema } },
    },
    async function getUserRoles(request) {
      return { success: true as const, data: await roles.getRoles(callerOf(request), request.params.userId) };
    },
  );

  app.post(
    '/:userId',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags,
        security,
        summary: "Replace a user's roles (admin)",
        params: UserRolesParamsSchema,
        body: SetUserRolesBodySchema,
        response: { 200: UserRolesResponseSchema },
      },
    },
    async function setUserRoles(request) {
      const data = await roles.setRoles(callerOf(request), request.params.userId, request.body.roles, request.log);
      return { success: true as const, message: 'Roles updated', data };
    },
  );
};

export default rolesRoutes;
