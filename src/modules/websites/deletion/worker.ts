import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../../../config.ts';
import { settlesWithin } from '../../../lib/deadline.ts';
import { shutdownBudget } from '../../../lib/shutdown-budget.ts';
import type { WebsitesService } from '../service.ts';

// A website's deletion is begun by DELETE /api/websites/:id and carried out in
// batches by a task of the process (running.ts). Two things may leave a
// website marked (hidden and keyless, its rows still there): a process that
// stopped midway, and a deletion whose batches gave up after the request had
// its answer (202). So the deletions left unfinished are swept up a minute
// after start (off the start-up path) and every five minutes after: at
// start alone, a deletion that failed after its 202 would wait for the next
// deploy. A sweep joins a deletion running here rather than starting another;
// a DELETE finishes a marked website too.
//
// At shutdown every deletion stops after its current batch (preClose, so a
// request waiting for one answers 202 at once instead of holding the close),
// and the close waits for those batches until the drain's share of the
// deadline is spent (lib/shutdown-budget.ts). A batch still running then is
// ended with the pool, its transaction rolled back: the website stays marked,
// and the next start finishes it.

const FIRST_SWEEP_AFTER_MS = 60_000;
const SWEEP_EVERY_MS = 5 * 60_000;

/** Runs `sweep` once after `firstAfterMs`, then every `everyMs`; a timer that fires while one is running joins it. */
export function scheduleSweeps(sweep: () => Promise<void>, { firstAfterMs, everyMs }: { firstAfterMs: number; everyMs: number }) {
  let sweeping: Promise<void> | undefined;
  const run = () => {
    sweeping ??= sweep().finally(() => (sweeping = undefined));
  };
  // Not holding the process open.
  const first = setTimeout(run, firstAfterMs).unref();
  const every = setInterval(run, everyMs).unref();
  return {
    /** No further sweep starts; the one running, if any (it has been told to stop by then). */
    stop(): Promise<void> | undefined {
      clearTimeout(first);
      clearInterval(every);
      return sweeping;
    },
  };
}

/** Whether `task` (none: at once) ends within `timeoutMs`. */
const endsWithin = async (task: Promise<void> | undefined, timeoutMs: number): Promise<boolean> => !task || settlesWithin(task, timeoutMs);

/** Sweeps are not scheduled under NODE_ENV=test, where apps share one database and tests sweep by hand. */
export default fp<{ config: Config; websites: WebsitesService }>(
  async function websiteDeletionPlugin(app: FastifyInstance, { config, websites }) {
    const sweeps =
      config.NODE_ENV === 'test'
        ? undefined
        : scheduleSweeps(
            () =>
              websites
                .finishLeftDeletionsElevated()
                .then((finished) => {
                  if (finished > 0) app.log.info({ finished }, 'finished website deletions left unfinished');
                })
                .catch((error) => app.log.error({ err: error }, 'finishing website deletions failed')),
            { firstAfterMs: FIRST_SWEEP_AFTER_MS, everyMs: SWEEP_EVERY_MS },
          );
    let deadline = Infinity;
    app.addHook('preClose', async () => {
      websites.stopDeletions();
      deadline = Date.now() + shutdownBudget(config.SHUTDOWN_TIMEOUT_MS).drainMs;
    });
    app.addHook('onClose', async () => {
      const sweeping = sweeps?.stop();
      const left = () => (Number.isFinite(deadline) ? Math.max(0, deadline - Date.now()) : 0);
      // A sweep ends once the deletion it joined has; it can be between two, reading which are left.
      const settled = (await websites.deletionsSettled(left())) && (await endsWithin(sweeping, left()));
      if (!settled) app.log.warn('website deletions still running at the end of their shutdown budget: the pool closes under them, and the next start finishes them');
    });
  },
  { name: 'website-deletion', dependencies: ['db'] },
);
