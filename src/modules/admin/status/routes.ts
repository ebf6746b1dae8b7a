import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { PassThrough } from 'node:stream';
import cookie from '@fastify/cookie';
import escapeHtml from 'escape-html';
import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import type { Config } from '../../../config.ts';
import { AppError, forbidden } from '../../../lib/errors.ts';
import { MessageResponseSchema } from '../../../lib/schemas.ts';
import { bearerToken, type Caller, callerOf, isAdmin } from '../../../plugins/auth.ts';
import { inRateLimitGroup } from '../../../plugins/rate-limit.ts';
import { createHealthService } from '../health.ts';
import { AssetParamsSchema, SignInBodySchema } from './schemas.ts';
import { createStatusSessionService, NOT_AN_ADMIN } from './session.ts';
import { createStreamRegistry, END_REASONS, type EndReason } from './streams.ts';

// /admin/status: the live dashboard (SPEC section 1), admin only. The page and
// its assets are plain files in this folder; numbers arrive as server-sent
// events from /admin/status/stream. Credentials: a Bearer header, or the
// HttpOnly cookie that the page's own sign-in form obtains from
// POST /admin/status/session. Never a token in a URL.

export const SESSION_COOKIE = 'admin_status_session';
/** Open dashboard streams one admin may hold; a new one ends the oldest. */
export const MAX_STREAMS_PER_ADMIN = 3;
/** How long a browser waits before it opens a stream again after losing one. */
export const STREAM_RETRY_MS = 3_000;
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
  const streams = createStreamRegistry(MAX_STREAMS_PER_ADMIN);

  /**
   * A stream outlives the check made when it opened: every
   * ADMIN_STREAM_RECHECK_MS the token is verified again and its session and
   * roles read afresh, so a signed-out or demoted admin's stream ends. A
   * database hiccup (503) is not a verdict: the stream stays until the next check.
   */
  async function stillAdmin(token: string, log: FastifyBaseLogger): Promise<boolean> {
    try {
      const caller = await app.callerFromToken(token, log, { fresh: true });
      return isAdmin(caller);
    } catch (error) {
      return !(error instanceof AppError && (error.statusCode === 401 || error.statusCode === 403));
    }
  }

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

  app.get('/stream', { onRequest: authorize, config: { metrics: false }, schema: { hide: true } }, async function openStream(request, reply) {
    // A client that left while it was being authorized: its response closed
    // before any listener here, and a stream opened for it would hold one of
    // its admin's places, pushing out a live tab, until found stalled.
    if (reply.raw.destroyed) return reply.send();
    const stream = new PassThrough();
    // When the client stops reading (a frozen tab, a dead link that TCP has not
    // noticed), writes would pile up in memory without bound. A dashboard wants
    // the latest snapshot, not a backlog: while the client is behind, ticks are
    // skipped, and a client behind for longer than stalledLimitMs is cut off.
    let behindSince: number | undefined;
    stream.on('drain', () => (behindSince = undefined));
    const send = (event: string, data: unknown) => {
      if (!stream.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)) behindSince ??= Date.now();
    };
    // Active visitors are read as the signed-in admin, under row-level security. They need the
    // database; when it fails, the snapshot still goes out with `live: null`, since the rest of it
    // (the database shown down) is what an operator watches the page for during an outage.
    let visitorsFailing = false;
    const readVisitors = () =>
      activeVisitors(callerOf(request)).then(
        (visitors) => ((visitorsFailing = false), visitors),
        (error: unknown) => {
          // Once per failing spell, not once a second.
          if (!visitorsFailing) request.log.warn({ err: error }, 'status stream: live visitors unavailable');
          visitorsFailing = true;
          return null;
        },
      );
    // A tick still waiting for a slow database is not joined by the next one: they would pile
    // up, one more every interval, each holding out for a pooled connection.
    let ticking = false;
    const tick = async () => {
      if (behindSince !== undefined) {
        if (Date.now() - behindSince < stalledLimitMs) return;
        request.log.warn({ behindMs: Date.now() - behindSince }, 'status stream closed: its client stopped reading');
        return stop();
      }
      if (ticking) return;
      ticking = true;
      try {
        const [metrics, report, visitors] = await Promise.all([app.metrics.snapshot(), health(), readVisitors()]);
        // Things may have changed while the snapshot was read.
        if (stopped || behindSince !== undefined) return;
        send('snapshot', { metrics, health: report, live: visitors, sample: app.metrics.history().at(-1) ?? null });
      } finally {
        ticking = false;
      }
    };
    const timer = setInterval(() => void tick().catch((error) => request.log.error({ err: error }, 'status stream tick failed')), intervalMs);
    // authorize() has set the caller and put the cookie's token, if any, in the header.
    const token = bearerToken(request) ?? '';
    const owner = `${request.caller?.kind}:${request.caller?.userId}`;
    const recheck = setInterval(() => void stillAdmin(token, request.log).then((ok) => ok || stop('signed-out')), config.ADMIN_STREAM_RECHECK_MS);
    let stopped = false;
    const stop = (reason?: EndReason) => {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      clearInterval(recheck);
      streams.removeStream(owner, stream, stop);
      // Ending waits for the buffer to reach the client; one that is behind may never take it.
      if (behindSince !== undefined) return void stream.destroy();
      if (reason) send('end', { code: reason, reason: END_REASONS[reason] });
      stream.end();
    };
    streams.addStream(owner, stream, stop);
    reply.raw.on('close', () => stop());
    // Fastify destroys the stream when the response is gone by the time it is sent.
    stream.on('close', () => stop());
    stream.write(`retry: ${STREAM_RETRY_MS}\n\n`);
    send('history', app.metrics.history());
    void tick().catch((error) => request.log.error({ err: error }, 'status stream tick failed'));
    return reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('x-accel-buffering', 'no')
      .send(stream);
  });
  app.addHook('preClose', async () => streams.endAll());

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
