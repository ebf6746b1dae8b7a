import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { aboutUser, callerOf, requireCaller } from '../../plugins/auth.ts';
import { noStore } from '../../plugins/security.ts';
import {
  CreateUserBodySchema,
  ListUsersQuerySchema,
  UpdateUserBodySchema,
  UserEmailParamsSchema,
  UserIdParamsSchema,
  UserResponseSchema,
  UsersResponseSchema,
} from './schemas.ts';
import { createUsersService } from './service.ts';

// /api/users: the signed-in user's own profile, and profiles by id or e-mail.
// Guards answer 401 and 403 early; the service and RLS decide self vs admin.
// The admins' list of every user (/api/admin/users) is here too: adminUsersRoutes.
const usersRoutes: FastifyPluginAsyncZod = async (app) => {
  app.addHook('onRequest', noStore);
  const users = createUsersService({ db: app.db, supabase: app.supabase });
  const security = [{ bearer: [] }];
  const tags = ['users'];

  app.get(
    '/me',
    { onRequest: app.requireUser, schema: { tags, security, summary: 'The signed-in user', response: { 200: UserResponseSchema } } },
    async function getOwnUser(request) {
      const caller = callerOf(request);
      return { success: true as const, data: await aboutUser(app, request, caller.userId, () => users.getUser(caller, caller.userId)) };
    },
  );

  app.get(
    '/email/:email',
    {
      onRequest: app.requireRole('admin'),
      schema: { tags, security, summary: 'A user by e-mail (admin)', params: UserEmailParamsSchema, response: { 200: UserResponseSchema } },
    },
    async function findUserByEmail(request) {
      return { success: true as const, data: await users.findUserByEmail(callerOf(request), request.params.email) };
    },
  );

  app.get(
    '/:id',
    {
      onRequest: requireCaller(app),
      schema: { tags, security, summary: 'A user (self or admin)', params: UserIdParamsSchema, response: { 200: UserResponseSchema } },
    },
    async function getUser(request) {
      const { id } = request.params;
      return { success: true as const, data: await aboutUser(app, request, id, () => users.getUser(callerOf(request), id)) };
    },
  );

  app.post(
    '/',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags,
        security,
        summary: 'Create an account through Supabase Auth (admin)',
        body: CreateUserBodySchema,
        response: { 201: UserResponseSchema },
      },
    },
    async function createUser(request, reply) {
      const data = await users.createUser(callerOf(request), request.body);
      return reply.status(201).send({ success: true as const, message: 'User created', data });
    },
  );

  app.put(
    '/:id',
    {
      onRequest: requireCaller(app),
      schema: {
        tags,
        security,
        summary: 'Change a name (self or admin) or an e-mail (admin)',
        params: UserIdParamsSchema,
        body: UpdateUserBodySchema,
        response: { 200: UserResponseSchema },
      },
    },
    async function updateUser(request) {
      const { id } = request.params;
      const data = await aboutUser(app, request, id, () => users.updateUser(callerOf(request), id, request.body, request.log));
      return { success: true as const, message: 'User updated', data };
    },
  );
};

/** /api/admin/users: every profile with its roles, for the admins' user list. */
export const adminUsersRoutes: FastifyPluginAsyncZod = async (app) => {
  app.addHook('onRequest', noStore);
  const users = createUsersService({ db: app.db, supabase: app.supabase });

  app.get(
    '/',
    {
      onRequest: app.requireRole('admin'),
      schema: {
        tags: ['admin'],
        security: [{ bearer: [] }],
        summary: 'Profiles with their roles (admin)',
        querystring: ListUsersQuerySchema,
        response: { 200: UsersResponseSchema.describe('A page of profiles') },
      },
    },
    async function listUsers(request) {
      const { users: data, total } = await users.listUsersWithRoles(callerOf(request), request.query);
      return { success: true as const, data, pagination: { total, limit: request.query.limit, offset: request.query.offset } };
    },
  );
};

export default usersRoutes;
