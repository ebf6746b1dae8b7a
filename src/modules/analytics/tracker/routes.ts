import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { inRateLimitGroup } from '../../../plugins/rate-limit.ts';

// GET /script.js: the tracker (tracker.js in this folder) that a site embeds
// with one tag. Comment lines and indentation are dropped when it is served;
// an ETag over the served text lets browsers revalidate it cheaply.

const MAX_AGE_SECONDS = 3600;

export async function loadTrackerScript() {
  const source = await readFile(path.join(import.meta.dirname, 'tracker.js'), 'utf8');
  // Indentation and blank lines go too (no string in it spans lines): a tenth of its size.
  const text = source
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('//'))
    .join('\n');
  return { text, etag: `"${createHash('sha256').update(text).digest('base64url').slice(0, 27)}"` };
}

const trackerRoutes: FastifyPluginAsyncZod = async (app) => {
  const script = await loadTrackerScript();

  app.get(
    '/script.js',
    {
      // Part of tracking, as ingestion is: on the general budget, the readers of a site behind
      // one address (an office, a carrier's NAT) lost the script after 100 loads in 15 minutes.
      ...inRateLimitGroup(app, 'ingest'),
      schema: {
        tags: ['analytics'],
        summary: 'The tracking script: <script async src="…/script.js" data-website-id="…"> on any site',
        headers: z.object({ 'if-none-match': z.string().optional() }),
        produces: ['text/javascript'],
        response: {
          200: z.string().describe('The script, as text/javascript; charset=utf-8, with an ETag'),
          304: z.undefined().describe('Not modified: the ETag matched'),
        },
      },
    },
    async function sendTrackerScript(request, reply) {
      // The type is set for the 304 too: a browser keeps a revalidated entry's
      // headers from it, and with nosniff a script stored as JSON never runs again.
      reply
        .type('text/javascript; charset=utf-8')
        .header('etag', script.etag)
        .header('cache-control', `public, max-age=${MAX_AGE_SECONDS}`)
        // Helmet's default (same-origin) would stop other sites' pages from loading it.
        .header('cross-origin-resource-policy', 'cross-origin');
      // A tag with crossorigin="anonymous" (which frameworks put on every script, and which
      // Subresource Integrity needs) loads the script in CORS mode: without this header the
      // browser refused it and the site recorded nothing. The script is public; the front
      // end's own origin keeps the answer the CORS plugin gave it.
      if (!reply.hasHeader('access-control-allow-origin')) reply.header('access-control-allow-origin', '*');
      const match = request.headers['if-none-match'];
      if (match !== undefined && match.split(',').some((tag) => tag.trim().replace(/^W\//, '') === script.etag)) {
        return reply.status(304).send();
      }
      return reply.send(script.text);
    },
  );
};

export default trackerRoutes;
