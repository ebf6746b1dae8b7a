import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { credentialsRefused, unauthorized } from '../../lib/errors.ts';
import { WEBSITE_READERS } from '../../lib/roles.ts';
import type { AnalyticsCaller } from './permissions.ts';

// The read routes' guard: a website's own API key (X-API-Key), or a Bearer
// token with a reader role. It establishes the request's AnalyticsCaller.

declare module 'fastify' {
  interface FastifyRequest {
    analyticsCaller: AnalyticsCaller | null;
  }
}

/** The caller the guard has established; routes behind it always have one. */
export function analyticsCallerOf(request: FastifyRequest): AnalyticsCaller {
  if (!request.analyticsCaller) throw unauthorized();
  return request.analyticsCaller;
}

/** X-API-Key when given (it must open a website), otherwise a Bearer token with a reader role. */
export function analyticsCallerGuard(app: FastifyInstance, websiteIdOfApiKey: (apiKey: string) => Promise<string | undefined>) {
  const requireReaderRole = app.requireRole(...WEBSITE_READERS);
  app.decorateRequest('analyticsCaller', null);

  return async function identifyAnalyticsCaller(request: FastifyRequest, reply: FastifyReply) {
    const apiKey = request.headers['x-api-key'];
    if (apiKey !== undefined) {
      const websiteId = typeof apiKey === 'string' ? await websiteIdOfApiKey(apiKey) : undefined;
      if (!websiteId) throw credentialsRefused('X-API-Key opens no website');
      request.analyticsCaller = { kind: 'api-key', websiteId };
      return;
    }
    await requireReaderRole.call(app, request, reply, () => {});
    request.analyticsCaller = request.caller;
  };
}
