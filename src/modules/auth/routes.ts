import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { frontendUrl, type Config } from '../../config.ts';
import { AppError, badRequest, unauthorized } from '../../lib/errors.ts';
import { MessageResponseSchema, PasswordSchema } from '../../lib/schemas.ts';
import { bearerToken } from '../../plugins/auth.ts';
import { inRateLimitGroup } from '../../plugins/rate-limit.ts';
import { noStore } from '../../plugins/security.ts';
import {
  LinkBodySchema,
  MeResponseSchema,
  RefreshBodySchema,
  RefreshResponseSchema,
  ResetPasswordBodySchema,
  SignInBodySchema,
  SignInResponseSchema,
  SignUpBodySchema,
  SignUpResponseSchema,
  UpdatePasswordBodySchema,
} from './schemas.ts';
import { createAuthService } from './service.ts';

// /api/auth: thin handlers over the auth service (SPEC section 4).
const authRoutes: FastifyPluginAsyncZod<{ config: Config }> = async (app, { config }) => {
  const auth = createAuthService({
    supabase: app.supabase,
    db: app.db,
    resetRedirectUrl: new URL('/reset-password', frontendUrl(config)).toString(),
    linkProviders: config.AUTH_LINK_PROVIDERS,
    forgetSession: app.forgetSession,
  });
  const tags = ['auth'];
  app.addHook('onRequest', noStore);

  app.post(
    '/signup',
    { ...inRateLimitGroup(app, 'auth'), schema: { tags, body: SignUpBodySchema, response: { 201: SignUpResponseSchema } } },
    async function signUp(request, reply) {
      const data = await auth.signUp(request.ip, request.body);
      return reply.status(201).send({ success: true, message: 'User registered successfully', data });
    },
  );

  app.post(
    '/signin',
    { ...inRateLimitGroup(app, 'auth'), schema: { tags, body: SignInBodySchema, response: { 200: SignInResponseSchema } } },
    async function signIn(request) {
      const email = request.body.email?.trim();
      const { password } = request.body;
      if (!email || !password) throw badRequest('Email and password are required');
      const data = await auth.signIn(request.ip, email, password);
      return { success: true as const, message: 'Signed in successfully', data };
    },
  );

  app.post('/refresh', { ...inRateLimitGroup(app, 'account'), schema: { tags, body: RefreshBodySchema, response: { 200: RefreshResponseSchema } } }, async function refreshSession(request) {
    const session = await auth.refresh(request.ip, request.body.refreshToken);
    return { success: true as const, message: 'Session refreshed', data: { session } };
  });

  app.post('/signout', { ...inRateLimitGroup(app, 'account'), schema: { tags, security: [{ bearer: [] }], response: { 200: MessageResponseSchema } } }, async function signOut(request) {
    let caller;
    try {
      caller = await app.authenticate(request);
    } catch (error) {
      if (error instanceof AppError && error.statusCode === 401) throw unauthorized('No active session');
      throw error;
    }
    if (caller.kind !== 'user') throw unauthorized('No active session');
    await auth.signOut(request.ip, bearerToken(request) ?? '', caller.sessionId);
    return { success: true as const, message: 'Signed out successfully' };
  });

  app.post(
    '/reset-password',
    { ...inRateLimitGroup(app, 'passwordReset'), schema: { tags, body: ResetPasswordBodySchema, response: { 200: MessageResponseSchema } } },
    async function requestPasswordReset(request) {
      const email = request.body.email?.trim().toLowerCase();
      if (!email) throw badRequest('Email is required');
      if (!SignUpBodySchema.shape.email.safeParse(email).success) {
        throw badRequest('Validation failed', { email: ['Invalid email format'] });
      }
      await auth.requestPasswordReset(request.ip, email);
      return { success: true as const, message: 'Password reset e-mail sent' };
    },
  );

  app.post(
    '/update-password',
    { ...inRateLimitGroup(app, 'account'), schema: { tags, body: UpdatePasswordBodySchema, response: { 200: MessageResponseSchema } } },
    async function updatePassword(request) {
      const { token, newPassword } = request.body;
      // Checked before the token is redeemed: a reset token works once, and a
      // password the auth server refuses afterwards would have used it up.
      const password = PasswordSchema.safeParse(newPassword ?? '');
      if (!password.success) {
        const message = password.error.issues[0].message;
        throw badRequest(message, { newPassword: [message] });
      }
      if (!token) throw badRequest('Invalid or expired reset token');
      await auth.updatePassword(request.ip, token, password.data);
      return { success: true as const, message: 'Password updated successfully' };
    },
  );

  app.get(
    '/me',
    { ...inRateLimitGroup(app, 'account'), onRequest: app.requireUser, schema: { tags, security: [{ bearer: [] }], response: { 200: MeResponseSchema } } },
    async function getMe(request) {
      const caller = request.caller;
      if (caller?.kind !== 'user') throw unauthorized();
      return { success: true as const, data: await auth.me(caller) };
    },
  );

  app.post(
    '/link',
    { ...inRateLimitGroup(app, 'account'), onRequest: app.requireUser, schema: { tags, security: [{ bearer: [] }], body: LinkBodySchema, response: { 200: MessageResponseSchema } } },
    async function linkIdentity(request) {
      await auth.linkIdentity(request.ip, bearerToken(request) ?? '', request.body);
      return { success: true as const, message: 'Identity linked successfully' };
    },
  );
};

export default authRoutes;
