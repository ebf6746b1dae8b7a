import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { type Config, resetPasswordUrl } from '../../config.ts';
import { AppError, badRequest, unauthorized, withBearerChallenge } from '../../lib/errors.ts';
import { MessageResponseSchema, PasswordSchema } from '../../lib/schemas.ts';
import { aboutUser, bearerToken } from '../../plugins/auth.ts';
import { inRateLimitGroup } from '../../plugins/rate-limit.ts';
import { noStore } from '../../plugins/security.ts';
import { createResetTokenBudget } from './reset-token-budget.ts';
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
    resetRedirectUrl: resetPasswordUrl(config),
    linkProviders: config.AUTH_LINK_PROVIDERS,
    forgetSession: app.forgetSession,
    forgetUserSessions: app.forgetUserSessions,
    claims: app.exclusiveClaims,
    resetTokenBudget: createResetTokenBudget({
      store: app.newRateStore(),
      max: config.RESET_TOKEN_ATTEMPTS_PER_WINDOW,
      windowMs: config.RESET_TOKEN_WINDOW_MS,
    }),
  });
  const tags = ['auth'];
  app.addHook('onRequest', noStore);

  app.post(
    '/signup',
    {
      ...inRateLimitGroup(app, 'auth'),
      schema: {
        tags,
        summary: 'Create an account (public)',
        description:
          'Creates the account in Supabase Auth and answers with a session (`data.session` is null while the auth server asks for ' +
          'e-mail confirmation). 409 `User with this email already exists` (confirmed or not); 503 when the auth server does not answer.',
        body: SignUpBodySchema,
        response: { 201: SignUpResponseSchema },
      },
    },
    async function signUp(request, reply) {
      const data = await auth.signUp(request.ip, request.body);
      return reply.status(201).send({ success: true, message: 'User registered successfully', data });
    },
  );

  app.post(
    '/signin',
    {
      ...inRateLimitGroup(app, 'auth'),
      schema: {
        tags,
        summary: 'Sign in with e-mail and password (public)',
        description:
          '400 `Email and password are required` when either is missing or empty; 401 `Invalid email or password`; ' +
          '403 `Email not confirmed` for the right password of an account whose address is not confirmed yet; ' +
          '503 when the auth server does not answer.',
        body: SignInBodySchema,
        response: { 200: SignInResponseSchema },
      },
    },
    async function signIn(request) {
      const email = request.body.email?.trim();
      const { password } = request.body;
      if (!email || !password) throw badRequest('Email and password are required');
      const data = await auth.signIn(request.ip, email, password);
      return { success: true as const, message: 'Signed in successfully', data };
    },
  );

  app.post(
    '/refresh',
    {
      ...inRateLimitGroup(app, 'account'),
      schema: {
        tags,
        summary: 'A new session for a refresh token (public)',
        description:
          'Each refresh hands out a new refresh token. 401 `Invalid or expired refresh token` (also after 30 days unused, ' +
          'and for a token used again after newer ones, which ends its whole session); ' +
          '503 when the auth server does not answer within its deadline, and with Retry-After while other refreshes of ' +
          'the same session keep it busy: the client keeps its session and retries with the same token.',
        body: RefreshBodySchema,
        response: { 200: RefreshResponseSchema },
      },
    },
    async function refreshSession(request) {
      const session = await auth.refresh(request.ip, request.body.refreshToken, request.log);
      return { success: true as const, message: 'Session refreshed', data: { session } };
    },
  );

  app.post(
    '/signout',
    {
      ...inRateLimitGroup(app, 'account'),
      schema: {
        tags,
        summary: "End the caller's session",
        description:
          'Ends the session at the auth server; its tokens stop working at once here, within 5 s on other instances. ' +
          'An access token that has expired ends its session too (its signature is checked, not its expiry). ' +
          '401 `No active session` without a user token of this project, or when its session has ended (the legacy admin token has no session).',
        security: [{ bearer: [] }],
        response: { 200: MessageResponseSchema },
      },
    },
    async function signOut(request) {
      const signedOut = { success: true as const, message: 'Signed out successfully' };
      let caller;
      try {
        caller = await app.authenticate(request);
      } catch (error) {
        if (!(error instanceof AppError && error.statusCode === 401)) throw error;
        // A user back after the access token's hour signs out with it: its session would
        // otherwise live on (its refresh token still works) while the user was told it ended.
        const token = bearerToken(request);
        const session = token ? await app.sessionOfToken(token, request.log) : null;
        if (!session) throw withBearerChallenge(unauthorized('No active session'), token ? 'invalid' : 'missing');
        await auth.signOutInDatabase(session);
        return signedOut;
      }
      if (caller.kind !== 'user') throw withBearerChallenge(unauthorized('No active session'), 'invalid');
      await auth.signOut(request.ip, bearerToken(request) ?? '', caller);
      return signedOut;
    },
  );

  app.post(
    '/reset-password',
    {
      ...inRateLimitGroup(app, 'passwordReset'),
      schema: {
        tags,
        summary: 'Send a password reset e-mail (public)',
        description:
          'The e-mail links to the front end with the token for update-password. 400 `Email is required`; 404 `No user found ' +
          'with this email`; 429 for a second request for one address within a minute; 503 when the auth server does not answer.',
        body: ResetPasswordBodySchema,
        response: { 200: MessageResponseSchema },
      },
    },
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
    {
      ...inRateLimitGroup(app, 'account'),
      schema: {
        tags,
        summary: 'Set a new password with the token from the reset e-mail (public)',
        description:
          'Then every session of the user ends; a new password equal to the current one is answered so too (200). ' +
          '400 `New password is required`, `Password must be at least 6 characters` or ' +
          '`… at most 72 bytes` (checked before the token, which works once, is redeemed), or `Invalid or expired reset token` ' +
          '(also once the e-mail is an hour old); ' +
          '429 for every client once RESET_TOKEN_ATTEMPTS_PER_WINDOW (when set) tokens were tried in the window, from any address; ' +
          '503 when the auth server does not answer.',
        body: UpdatePasswordBodySchema,
        response: { 200: MessageResponseSchema },
      },
    },
    async function updatePassword(request) {
      const { token, newPassword } = request.body;
      // Checked before the token is redeemed: a reset token works once, and a
      // password the auth server refuses afterwards would have used it up.
      // Missing is said as such: `at least 6 characters` misled a client that sent the password as another field.
      if (!newPassword) throw badRequest('New password is required', { newPassword: ['New password is required'] });
      const password = PasswordSchema.safeParse(newPassword);
      if (!password.success) {
        const message = password.error.issues[0].message;
        throw badRequest(message, { newPassword: [message] });
      }
      if (!token) throw badRequest('Invalid or expired reset token');
      await auth.updatePassword(request.ip, token, password.data, request.log);
      return { success: true as const, message: 'Password updated successfully' };
    },
  );

  app.get(
    '/me',
    {
      ...inRateLimitGroup(app, 'account'),
      onRequest: app.requireUser,
      schema: {
        tags,
        summary: 'The signed-in user, with roles',
        description: '`roles` is `user` and the roles assigned. 401 without a valid user token (the legacy admin token is not one).',
        security: [{ bearer: [] }],
        response: { 200: MeResponseSchema },
      },
    },
    async function getMe(request) {
      const caller = request.caller;
      if (caller?.kind !== 'user') throw unauthorized();
      return { success: true as const, data: await aboutUser(app, request, caller.userId, () => auth.me(caller)) };
    },
  );

  app.post(
    '/link',
    {
      ...inRateLimitGroup(app, 'account'),
      onRequest: app.requireUser,
      schema: {
        tags,
        summary: "Link an OIDC provider's identity to the caller's account",
        description:
          "`token` is the provider's id token; `nonce` the raw value whose SHA-256 the front end sent to the provider, if it did. " +
          '400 `Unsupported provider`, `Invalid provider token` or `Identity linking is disabled`; 409 `Identity is already ' +
          'linked to an account`; 503 when the auth server does not answer.',
        security: [{ bearer: [] }],
        body: LinkBodySchema,
        response: { 200: MessageResponseSchema },
      },
    },
    async function linkIdentity(request) {
      await auth.linkIdentity(request.ip, bearerToken(request) ?? '', request.body);
      return { success: true as const, message: 'Identity linked successfully' };
    },
  );
};

export default authRoutes;
