import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { inRateLimitGroup } from '../../../plugins/rate-limit.ts';

// GET /script.js: the tracking script a site owner adds with one tag
// (docs/analytics.md). Revalidated by ETag; an hour in caches. It is loaded
// by other sites' pages, so it says so (helmet's Cross-Origin-Resource-Policy
// would otherwise be same-origin, and the browser would refuse it), and it
// draws on the ingestion budget, as the events it sends do.

const SCRIPT_FILE = path.join(import.meta.dirname, 'tracker.js');

const TrackerHeadersSchema = z.object({ 'if-none-match': z.string().max(200).optional() });

const trackerRoutes: FastifyPluginAsyncZod = async (app) => {
  const script = await readFile(SCRIPT_FILE, 'utf8');
  const etag = `"${createHash('sha256').update(script).digest('base64url').slice(0, 22)}"`;

  app.get(
    '/script.js',
    {
      ...inRateLimitGroup(app, 'ingest'),
      schema: {
        tags: ['analytics'],
        summary: 'The tracking script: <script defer src=".../script.js" data-website-id="…"></script>',
        headers: TrackerHeadersSchema,
        response: { 200: z.string().describe('JavaScript (text/javascript)'), 304: z.null().describe('unchanged since the ETag given') },
      },
    },
    async function serveTrackerScript(request, reply) {
      reply
        .header('etag', etag)
        .header('cache-control', 'public, max-age=3600')
        .header('cross-origin-resource-policy', 'cross-origin');
      if (request.headers['if-none-match'] === etag) return reply.status(304).send(null);
      // A string with a non-JSON content type is sent as it is, not serialised.
      return reply.type('text/javascript; charset=utf-8').send(script);
    },
  );
};

export default trackerRoutes;
