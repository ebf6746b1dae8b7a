import Fastify, { type FastifyInstance, type FastifyServerOptions, LogController } from 'fastify';
import fp from 'fastify-plugin';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import type { Config } from './config.ts';
import { loggerOptions } from './logger.ts';
import authRoutes from './modules/auth/routes.ts';
import feedbackOutboxPlugin from './modules/feedback/outbox-worker.ts';
import feedbackRoutes from './modules/feedback/routes.ts';
import healthRoutes from './modules/health/routes.ts';
import authPlugin from './plugins/auth.ts';
import dbPlugin from './plugins/db.ts';
import errorsPlugin from './plugins/errors.ts';
import openApiPlugin from './plugins/openapi.ts';
import rateLimitPlugin, { type RateLimitOptions } from './plugins/rate-limit.ts';
import requestLogPlugin, { requestIdFor } from './plugins/request-log.ts';
import securityPlugin from './plugins/security.ts';
import supabasePlugin from './plugins/supabase.ts';

export const VERSION = '0.1.0';

export interface AppOptions {
  config: Config;
  rateLimit?: RateLimitOptions;
}

/** Fastify's own options for the app: logger, request ids, body limit, proxies. */
export function serverOptions(config: Config, logger: FastifyServerOptions['logger'] = loggerOptions(config.LOG_LEVEL)) {
  return {
    logger,
    genReqId: requestIdFor,
    // plugins/request-log.ts writes the one `http` line per request.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'requestId' }),
    bodyLimit: config.BODY_LIMIT_BYTES,
    trustProxy: config.TRUST_PROXY,
    return503OnClosing: true,
  } satisfies FastifyServerOptions;
}

/**
 * The whole application as one plugin. Load order: cross-cutting plugins
 * (errors first, so every later failure has the SPEC envelope), then routes.
 */
async function app(fastify: FastifyInstance, { config, rateLimit }: AppOptions) {
  fastify.setValidatorCompiler(validatorCompiler);
  fastify.setSerializerCompiler(serializerCompiler);

  await fastify.register(errorsPlugin);
  await fastify.register(requestLogPlugin);
  await fastify.register(securityPlugin, { config });
  await fastify.register(dbPlugin, { config });
  await fastify.register(authPlugin, { config });
  await fastify.register(supabasePlugin, { config });
  await fastify.register(rateLimitPlugin, { config, ...rateLimit });
  await fastify.register(openApiPlugin, { version: VERSION });

  await fastify.register(healthRoutes);
  await fastify.register(feedbackOutboxPlugin, { config });
  await fastify.register(feedbackRoutes, { config });
  await fastify.register(authRoutes, { prefix: '/api/auth', config });
}

// Not encapsulated, so the process (server.ts) and tests see its decorators.
const appPlugin = fp(app, { name: 'portfolio-backend' });
export default appPlugin;

/** Builds a ready app from a config object; tests use this, never the process. */
export async function buildApp(
  options: AppOptions,
  { logger, extend }: { logger?: FastifyServerOptions['logger']; extend?: (app: FastifyInstance) => Promise<void> } = {},
): Promise<FastifyInstance> {
  const fastify = Fastify(serverOptions(options.config, logger));
  await fastify.register(appPlugin, options);
  if (extend) await fastify.register(extend);
  await fastify.ready();
  return fastify;
}
