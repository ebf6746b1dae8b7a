import { readFile } from 'node:fs/promises';
import path from 'node:path';
import cookie from '@fastify/cookie';
import escapeHtml from 'escape-html';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../../config.ts';
import { AppError, forbidden } from '../../../lib/errors.ts';
import { MessageResponseSchema } from '../../../lib/schemas.ts';
import { bearerToken, type Caller } from '../../../plugins/auth.ts';
import { inRateLimitGroup } from '../../../plugins/rate-limit.ts';
import { createHealthService } from '../health.ts';
import { AssetParamsSchema, SignInBodySchema } from './schemas.ts';
import { createStatusSessionService, NOT_AN_ADMIN } from './session.ts';
import { createStatusStream } from './stream.ts';

// /admin/status: the live dashboard (SPEC section 1), admin only. The page and
// its assets are plain files in this folder; numbers arrive as server-sent
// events from /admin/status/stream. Credentials: a Bearer header, or the
// HttpOnly cookie that the page's own sign-in form obtains from
// POST /admin/status/session. Never a token in a URL.

export const SESSION_COOKIE = 'admin_status_session';
const HERE = import.meta.dirname;
// A Map, not an object literal: a lookup by the URL's file name must not
// find what every object inherits (`constructor`, `__proto__`, …).
const ASSETS = new Map([
  ['app.js', 'text/javascript; charset=utf-8'],
  ['charts.js', 'text/javascript; charset=utf-8'],
  ['signin.js', 'text/javascript; charset=utf-8'],
  ['style.css', 'text/css; charset=utf-8'],
]);

/** The session cookie: HttpOnly, SameSite=Strict, Secure in production, sent only to the dashboard's paths. */
export function sessionCookieOptions(config: Config, maxAge?: number) {
  return {
    httpOnly: true,
    sameSite: 'strict' as const,
    secure: config.NODE_ENV === 'production',
    path: '/admin/status',
    ...(maxAge === undefined ? {} : { maxAge }),
  };
}

export interface StatusOptions {
  config: Config;
  version: string;
  /** Milliseconds between snapshots on the stream (at most 2 s). */
  intervalMs?: number;
  /** Longest a stream's client may stay behind (not reading) before the stream is closed. */
  stalledLimitMs?: number;
  /** Visitors active now on every website the caller may see (the analytics module's, given by app.ts). */
  activeVisitors(caller: Caller): Promise<unknown>;
}

const statusRoutes: FastifyPluginAsyncZod<StatusOptions> = async (app, { config, version, intervalMs = 1_000, stalledLimitMs = 60_000, activeVisitors }) => {
  if (!app.hasRequestDecorator('cookies')) await app.register(cookie);
  // The dashboard is called by its own pages only, never across origins: its
  // answers carry no CORS headers, and a preflight for it is refused. With
  // them, a page of the front end's origin (a site that shares the API's
  // registrable domain, to which SameSite=Strict sends the cookie) could
  // read the stream with an admin's cookie, or sign them out.
  // @fastify/cors skips a route whose config says `cors: false`, a key its types do not declare.
  const withoutCors = { cors: false };
  app.addHook('onRoute', (route) => {
    route.config = { ...route.config, ...withoutCors };
  });
  const refusePreflight = async () => {
    throw forbidden('The status dashboard takes no calls from other origins');
  };
  app.options('/', { schema: { hide: true } }, refusePreflight);
  app.options('/*', { schema: { hide: true } }, refusePreflight);
  const files = Object.fromEntries(
    await Promise.all(['index.html', 'signin.html', ...ASSETS.keys()].map(async (name) => [name, await readFile(path.join(HERE, name), 'utf8')])),
  ) as Record<string, string>;
  const health = createHealthService({ db: app.db, config, version, startedAt: app.metrics.startedAt, outbox: app.feedbackOutbox, pingRateLimitStore: app.pingRateLimitStore }).cachedHealthCheck();
  const requireAdmin = app.requireRole('admin');
  const sessions = createStatusSessionService({
    supabase: app.supabase,
    db: app.db,
    forgetSession: app.forgetSession,
    sessionOfToken: app.sessionOfToken,
  });
  const { openStream, endAll } = createStatusStream(app, { config, intervalMs, stalledLimitMs, activeVisitors, health });

  /**
   * The Bearer header if there is one, else the session cookie; both go through the same guard.
   * An Authorization header of another scheme is no credential of ours: a proxy guarding /admin
   * with basic auth makes the browser send one with every request, and the cookie must still count.
   */
  async function authorize(request: FastifyRequest, reply: FastifyReply) {
    const fromCookie = request.cookies[SESSION_COOKIE];
    // The auth context reads only the Authorization header.
    if (!bearerToken(request) && fromCookie) request.headers.authorization = `Bearer ${fromCookie}`;
    await requireAdmin.call(app, request, reply, () => {});
  }

  const page = (reply: FastifyReply, status: number, html: string) =>
    reply.status(status).header('cache-control', 'no-store').type('text/html; charset=utf-8').send(html);

  app.get('/', { schema: { hide: true } }, async function showDashboard(request, reply) {
    try {
      await authorize(request, reply);
    } catch (error) {
      if (!(error instanceof AppError) || (error.statusCode !== 401 && error.statusCode !== 403)) throw error;
      const reason = error.statusCode === 403 ? NOT_AN_ADMIN : 'Sign in with an administrator account.';
      return page(reply, error.statusCode, files['signin.html'].replace('{{reason}}', escapeHtml(reason)));
    }
    return page(reply, 200, files['index.html']);
  });

  app.get('/assets/:file', { schema: { hide: true, params: AssetParamsSchema } }, async function sendAsset(request, reply) {
    const type = ASSETS.get(request.params.file);
    if (!type) return reply.callNotFound();
    return reply.header('cache-control', 'no-cache').type(type).send(files[request.params.file]);
  });

  app.get('/stream', { onRequest: authorize, config: { metrics: false }, schema: { hide: true } }, openStream);
  app.addHook('preClose', async () => endAll());

  // What the page asks when its stream is refused: EventSource cannot read the
  // status of a refused request, so it cannot tell an ended session from an outage.
  app.get('/session', { onRequest: authorize, schema: { hide: true, response: { 200: MessageResponseSchema } } }, async function checkSession() {
    return { success: true as const, message: 'Signed in' };
  });

  app.post(
    '/session',
    { ...inRateLimitGroup(app, 'auth'), schema: { hide: true, body: SignInBodySchema, response: { 200: MessageResponseSchema } } },
    async function signIn(request, reply) {
      const { accessToken, expiresIn } = await sessions.signInAdmin(request.ip, request.body.email, request.body.password);
      reply.setCookie(SESSION_COOKIE, accessToken, sessionCookieOptions(config, expiresIn));
      return { success: true as const, message: 'Signed in' };
    },
  );

  app.delete('/session', { schema: { hide: true, response: { 200: MessageResponseSchema } } }, async function signOut(request, reply) {
    const accessToken = request.cookies[SESSION_COOKIE];
    if (accessToken) await sessions.signOut(request.ip, accessToken, request.log);
    reply.clearCookie(SESSION_COOKIE, sessionCookieOptions(config));
    return { success: true as const, message: 'Signed out' };
  });
};

export default statusRoutes;
