import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { rolesInWords, WEBSITE_WRITERS } from '../../../lib/roles.ts';
import { callerOf } from '../../../plugins/auth.ts';
import { noStore } from '../../../plugins/security.ts';
import { ErasureBodySchema, ErasureParamsSchema, ErasureResponseSchema } from './schemas.ts';
import { createErasureService } from './service.ts';

// POST /api/analytics/websites/:websiteId/erasures (not in the SPEC): a
// website's owner answers one person's erasure request. Those who manage the
// website (editors and admins, as for its key) may; a website's id is public
// (the tracker's tag) and its API key only reads, so neither opens this.

const analyticsErasureRoutes: FastifyPluginAsyncZod = async (app) => {
  const erasures = createErasureService({ db: app.db });

  app.post(
    '/websites/:websiteId/erasures',
    {
      onRequest: [noStore, app.requireRole(...WEBSITE_WRITERS)],
      schema: {
        tags: ['analytics'],
        security: [{ bearer: [] }],
        summary: `Erase one person's analytics on a website (${rolesInWords(WEBSITE_WRITERS)})`,
        description:
          "Deletes the person's events (every event of their ids, sessions and visitor ids) and renames their visitor and session ids " +
          'in the rollups to random pseudonyms: every figure of every range stays as it was. A person unknown or already erased ' +
          'answers 200 with every count 0.',
        params: ErasureParamsSchema,
        body: ErasureBodySchema,
        response: { 200: ErasureResponseSchema },
      },
    },
    async function erasePerson(request) {
      const data = await erasures.erasePerson(callerOf(request), request.params.websiteId, request.body, request.log);
      return { success: true as const, message: data.events + data.visitors + data.sessions === 0 ? 'Nothing to erase' : 'Analytics erased', data };
    },
  );
};

export default analyticsErasureRoutes;
