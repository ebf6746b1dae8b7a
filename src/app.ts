import type { Server } from 'node:http';
import Fastify, { type FastifyHttpOptions, type FastifyInstance, type FastifyServerOptions, LogController } from 'fastify';
import fp from 'fastify-plugin';
import { validatorCompiler } from 'fastify-type-provider-zod';
import type { Config } from './config.ts';
import { forgedForwardedForGuard } from './lib/client-network.ts';
import { LogSink } from './lib/log-sink.ts';
import { namingRepeatedKeys, parseQueryString } from './lib/query-string.ts';
import { replySerializerCompiler } from './lib/reply-serializer.ts';
import { loggerOptions } from './logger.ts';
import adminRoutes from './modules/admin/routes.ts';
import analyticsRoutes from './modules/analytics/routes.ts';
import { createAnalyticsService } from './modules/analytics/service.ts';
import trackerRoutes from './modules/analytics/tracker/routes.ts';
import statusRoutes from './modules/admin/status/routes.ts';
import authRoutes from './modules/auth/routes.ts';
import feedbackOutboxPlugin from './modules/feedback/outbox/plugin.ts';
import feedbackRoutes from './modules/feedback/routes.ts';
import healthRoutes from './modules/health/routes.ts';
import logsRoutes from './modules/logs/routes.ts';
import appLogsPlugin from './modules/logs/worker.ts';
import rolesRoutes from './modules/roles/routes.ts';
import usersRoutes, { adminUsersRoutes } from './modules/users/routes.ts';
import websitesRoutes from './modules/websites/routes.ts';
import authPlugin from './plugins/auth.ts';
import dbPlugin from './plugins/db.ts';
import errorsPlugin, { clientErrorHandler, frameworkErrorHandler, PATH_MATCHING } from './plugins/errors.ts';
import gracefulPlugin from './plugins/graceful.ts';
import jsonBodyPlugin from './plugins/json-body.ts';
import metricsPlugin from './plugins/metrics.ts';
import openApiPlugin, { docsPage } from './plugins/openapi.ts';
import rateLimitPlugin, { type RateLimitOptions } from './plugins/rate-limit.ts';
import refusalLogPlugin from './plugins/refusal-log.ts';
import requestLogPlugin, { requestIdFor } from './plugins/request-log.ts';
import securityPlugin, { headersBeforeRouting, headersWithoutRequest, pageSecurityPlugin } from './plugins/security.ts';
import supabasePlugin from './plugins/supabase.ts';

export const VERSION = '0.1.0';

export interface AppOptions {
  config: Config;
  rateLimit?: RateLimitOptions;
  /** Where the logger puts entries to store (modules/logs/worker.ts); buildApp makes one. */
  logSink?: LogSink;
  /**
   * A problem found after the start that the start would have refused (the
   * database login, judged when the database first answers): the process
   * owns what happens then (server.ts exits). Without it, the problem is logged.
   */
  onFatal?: (error: Error) => void;
}

/**
 * TRUST_PROXY as Fastify's trustProxy. Fastify now ignores a bare hop count
 * (it cannot vouch for the immediate peer), so a count becomes the classic
 * rule "the nearest `hops` addresses are proxies": right only when the app is
 * reachable through the proxy alone; otherwise configure the proxies'
 * addresses (README, Configuration).
 */
export function trustProxyOption(setting: Config['TRUST_PROXY']): FastifyServerOptions['trustProxy'] {
  if (typeof setting === 'number') return (_address: string, hop: number) => hop < setting;
  return setting;
}

/** Fastify's own options for the app: logger, request ids, body limit, proxies. */
export function serverOptions(config: Config, logger?: FastifyServerOptions['logger'], logSink?: LogSink) {
  return {
    logger: logger ?? loggerOptions(config.LOG_LEVEL, undefined, logSink),
    genReqId: requestIdFor,
    // plugins/request-log.ts writes the one `http` line per request.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    bodyLimit: config.BODY_LIMIT_BYTES,
    routerOptions: { ...PATH_MATCHING, querystringParser: parseQueryString },
    trustProxy: trustProxyOption(config.TRUST_PROXY),
    // A trusted hop's entry that is not an address is not the client's (lib/client-network.ts).
    ...(config.TRUST_PROXY === false ? {} : { rewriteUrl: forgedForwardedForGuard() }),
    // Given to Node's server as it is made as well: set only afterwards, as
    // Fastify sets it, Node never cut a request off. Node looks for requests
    // past their deadline every connectionsCheckingInterval (30 s by default).
    requestTimeout: config.REQUEST_TIMEOUT_MS,
    http: {
      requestTimeout: config.REQUEST_TIMEOUT_MS,
      connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(config.REQUEST_TIMEOUT_MS / 4))),
    },
    // plugins/graceful.ts answers requests that arrive while closing, in the envelope.
    return503OnClosing: false,
    // How long one plugin may take to load, in wall time. The default 10 s ended starts under load (boot is ~2 s of CPU; 20–25 s wall at load 22–30) with a plain-text FastifyError; 120 s covers a small CPU quota, and a start that truly hangs still ends with a line (server.ts).
    pluginTimeout: 120_000,
    // Errors the router raises before any hook runs (bad URL encoding, over-long
    // path parameters) get the same envelope and headers as every other error.
    frameworkErrors: frameworkErrorHandler(headersBeforeRouting(config)),
    // Requests Node's parser refuses (431, 408, 400): the same envelope, readable by the front end.
    clientErrorHandler: clientErrorHandler(headersWithoutRequest(config)),
  } satisfies FastifyHttpOptions<Server>;
}

/**
 * The whole application as one plugin. Load order: cross-cutting plugins
 * (errors first, so every later failure has the SPEC envelope), then routes.
 */
async function app(fastify: FastifyInstance, { config, rateLimit, logSink, onFatal }: AppOptions) {
  fastify.setValidatorCompiler<Parameters<typeof validatorCompiler>[0]['schema']>((route) => {
    const validate = validatorCompiler(route);
    if (route.httpPart === 'querystring') return (query: Record<string, unknown>) => namingRepeatedKeys(validate(query), query);
    if (route.httpPart !== 'body') return validate;
    // A request without a body (or with `null`) is checked as an empty object,
    // so the answer names each required field instead of "expected object".
    return (body: unknown) => validate(body ?? {});
  });
  fastify.setSerializerCompiler(replySerializerCompiler);

  await fastify.register(errorsPlugin);
  await fastify.register(requestLogPlugin);
  await fastify.register(metricsPlugin, { config });
  await fastify.register(jsonBodyPlugin);
  await fastify.register(securityPlugin, { config });
  // After security: its 503 for a request arriving while closing carries the CORS headers.
  await fastify.register(gracefulPlugin, { answerTimeoutMs: config.REQUEST_TIMEOUT_MS });
  await fastify.register(dbPlugin, { config, onFatal });
  await fastify.register(appLogsPlugin, { config, sink: logSink });
  await fastify.register(refusalLogPlugin);
  await fastify.register(authPlugin, { config });
  await fastify.register(supabasePlugin, { config });
  await fastify.register(rateLimitPlugin, { config, ...rateLimit });
  await fastify.register(openApiPlugin, { version: VERSION });

  await fastify.register(healthRoutes);
  await fastify.register(feedbackOutboxPlugin, { config });
  await fastify.register(feedbackRoutes, { config });
  await fastify.register(authRoutes, { prefix: '/api/auth', config });
  await fastify.register(adminRoutes, { prefix: '/api/admin', config, version: VERSION });
  await fastify.register(logsRoutes, { prefix: '/api/admin/logs' });
  await fastify.register(adminUsersRoutes, { prefix: '/api/admin/users' });
  await fastify.register(usersRoutes, { prefix: '/api/users' });
  await fastify.register(rolesRoutes, { prefix: '/api/userRoles' });
  await fastify.register(websitesRoutes, { prefix: '/api/websites', config });
  await fastify.register(analyticsRoutes, { prefix: '/api/analytics', config });
  await fastify.register(trackerRoutes);
  // The HTML pages, in a scope of their own that alone gets helmet's policy
  // (plugins/security.ts). The dashboard shows the analytics module's live
  // count without importing it.
  const analytics = createAnalyticsService({ db: fastify.db });
  await fastify.register(async function htmlPages(pages) {
    await pages.register(pageSecurityPlugin, { config });
    if (config.API_DOCS === 'on') await docsPage(pages, { production: config.NODE_ENV === 'production' });
    await pages.register(statusRoutes, {
      prefix: '/admin/status',
      config,
      version: VERSION,
      activeVisitors: (caller) => analytics.activeVisitors(caller, undefined),
    });
  });
}

// Not encapsulated, so the process (server.ts) and tests see its decorators.
const appPlugin = fp(app, { name: 'portfolio-backend' });
export default appPlugin;

/** Builds a ready app from a config object; tests use this, never the process. */
export async function buildApp(
  options: AppOptions,
  { logger, extend }: { logger?: FastifyServerOptions['logger']; extend?: (app: FastifyInstance) => Promise<void> } = {},
): Promise<FastifyInstance> {
  const logSink = options.logSink ?? new LogSink();
  const fastify = Fastify(serverOptions(options.config, logger, logSink));
  await fastify.register(appPlugin, { ...options, logSink });
  if (extend) await fastify.register(extend);
  await fastify.ready();
  return fastify;
}
