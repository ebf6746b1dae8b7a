import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../../config.ts';
import { createWebsitesService } from '../service.ts';

// A website's deletion is begun by DELETE /api/websites/:id and carried out
// in batches within that request (service.ts). A process that stops midway
// leaves the website marked: hidden and keyless, but its rows still there.
// This finishes such deletions once, a minute after start (off the start-up
// path); a repeated DELETE finishes one as well.

const FIRST_RUN_AFTER_MS = 60_000;

/** Not under NODE_ENV=test, where apps share one database and tests call finishLeftDeletionsElevated by hand. */
export default fp<{ config: Config }>(
  async function websiteDeletionPlugin(app: FastifyInstance, { config }) {
    if (config.NODE_ENV === 'test') return;
    const websites = createWebsitesService({ db: app.db, deleteBatchSize: config.WEBSITE_DELETE_BATCH });
    let closing = false;
    let running: Promise<unknown> | undefined;
    const first = setTimeout(() => {
      running = websites
        .finishLeftDeletionsElevated(() => closing)
        .then((finished) => {
          if (finished > 0) app.log.info({ finished }, 'finished website deletions left unfinished');
        })
        .catch((error) => app.log.error({ err: error }, 'finishing website deletions failed'));
    }, FIRST_RUN_AFTER_MS).unref();
    app.addHook('onClose', async () => {
      closing = true;
      clearTimeout(first);
      await running;
    });
  },
  { name: 'website-deletion', dependencies: ['db'] },
);
