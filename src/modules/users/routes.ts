import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { callerOf, requireCaller } from '../../plugins/auth.ts';
import {
  CreateUserBodySchema,
  UpdateUserBodySchema,
  UserEmailParamsSchema,
  UserIdParamsSchema,
  UserResponseSchema,
} from './schemas.ts';
import { usersService } from './service.ts';

// /api/users: the signed-in user's own profile, and profiles by id or e-mail.
// Guards answer 401 and 403 early; the service and RLS decide self vs admin.
const usersRoutes: FastifyPluginAsyncZod = async (app) => {
  const users = usersService(app);
  const security = [{ bearer: [] }];
  const tags = ['users'];

  app.get(
    '/me',
    { onRequest: app.requireUser, schema: { tags, security, summary: 'The signed-in user', response: { 200: UserResponseSchema } } },
    async (request) => ({ success: true as const, data: await users.getUser(callerOf(request), callerOf(request).userId) }),
  );

  app.get(
    '/email/:email',
    {
      onRequest: app.requireRole('admin'),
      schema: { tags, security, summary: 'A user by e-mail (admin)', params: UserEmailParamsSchema, response: { 200: UserResponseSchema } },
    },
    async (request) => ({ success: true as const, data: await users.findUserByEmail(callerOf(request), request.params.email) }),
  );

  app.get(
    '/:id',
    {
      onRequest: requireCaller(app),
      schema: { tags, security, summary: 'A user (self or admin)', params: UserIdParamsSchema, response: { 200: UserResponseSchema } },
    },
    async (request) => ({ success: true as const, data: await users.getUser(callerOf(request), request.params.id) }),
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
    async (request, reply) =>
      reply.status(201).send({ success: true as const, message: 'User created', data: await users.createUser(callerOf(request), request.body) }),
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
    async (request) => ({
      success: true as const,
      message: 'User updated',
      data: await users.updateUser(callerOf(request), request.params.id, request.body),
    }),
  );
};

export default usersRoutes;
