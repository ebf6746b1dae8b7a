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
          "Deletes the person's events (the events carrying a given id, and every event of those events' sessions; a visitor id or " +
          'user id met there is not followed to other sessions) and renames the visitor and session ids those events carry in the ' +
          'rollups to random pseudonyms: every figure of every range stays as it was. `dryRun: true` answers the same counts and ' +
          'changes nothing. A person unknown or already erased answers 200 with every count 0.',
        params: ErasureParamsSchema,
        body: ErasureBodySchema,
        response: { 200: ErasureResponseSchema },
      },
    },
    async function erasePerson(request) {
      const data = await erasures.erasePerson(callerOf(request), request.params.websiteId, request.body, request.log);
      const nothing = data.events + data.visitors + data.sessions === 0;
      const message = nothing ? 'Nothing to erase' : request.body.dryRun ? 'Dry run: nothing erased' : 'Analytics erased';
      return { success: true as const, message, data };
    },
  );
};

export default analyticsErasureRoutes;
