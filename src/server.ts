import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApp, VERSION } from './app.ts';
import { type Config, ConfigError, parseConfig } from './config.ts';
import { productionWarnings } from './config-production.ts';
import { nodeVersionWarning } from './lib/node-version.ts';
import { unpatchedDependency } from './lib/patches-check.ts';
import { shutdownBudget } from './lib/shutdown-budget.ts';
import { loggerOptions } from './logger.ts';
import { createCountryLookup } from './modules/analytics/geo.ts';

// The process: configuration, listening, and a graceful close on SIGINT,
// SIGTERM or SIGHUP (stop accepting, finish requests in flight, flush, close pools).
// Requests in flight are bounded by their share of the deadline
// (lib/shutdown-budget.ts): the server closes only when the last one has
// ended, and the flush and the pool's close come after that.

/** A configuration problem ends the start with its one line, never a stack trace. */
function exitOnConfigError(error: unknown): never {
  if (error instanceof ConfigError) {
    console.error(error.message);
    process.exit(1);
  }
  throw error;
}

/** What a refused start's line is written to once the log exists. */
interface StartLog {
  error(message: string): void;
  error(fields: object, message: string): void;
}

/**
 * Says why a start found late is refused (the port taken, the database
 * refusing the login). The log has begun by then: the line is an entry of it
 * at `error` (JSON, as every line before it), which a log shipper keeps, where
 * a line of text would be lost or read as garbage. With LOG_LEVEL=silent it is
 * the line of text still: a start never ends without saying why. (The app's
 * logger itself runs at warn then, for app_logs, so its level cannot tell.)
 */
function sayStartRefused(log: StartLog, logLevel: Config['LOG_LEVEL'], line: string): void {
  if (logLevel === 'silent') console.error(line);
  else log.error(line);
}

/** The one line a listen that failed for a reason of the machine's ends the start with; undefined for any other. */
function listenFailure(error: unknown, port: number, host: string): string | undefined {
  switch ((error as NodeJS.ErrnoException).code) {
    case 'EADDRINUSE':
      return `port ${port} on ${host} is taken: stop what listens there, or set PORT`;
    case 'EACCES':
      return `port ${port} on ${host} needs privileges this process lacks: set PORT above 1023`;
    case 'EADDRNOTAVAIL':
      return `HOST ${host} is not an address of this machine: set HOST`;
    // A name in HOST is looked up when the server listens.
    case 'ENOTFOUND':
      return `HOST ${host} is not a name this machine can resolve: set HOST to an address or a resolvable name`;
    case 'EAI_AGAIN':
      return `HOST ${host} could not be resolved (no answer from DNS): set HOST to an address, or start again`;
  }
  return undefined;
}

/**
 * The one line ANALYTICS_COUNTRY_DB ends the start with when it names no
 * country database this process can read; undefined when it can (or is unset).
 * The file is read while the app is built, deep in the analytics routes, whose
 * error names the file at best and a bad one not at all: opened here first
 * (geo.ts keeps the reader for the app), the failure names the setting.
 */
function countryDatabaseFailure(config: Config): string | undefined {
  if (config.ANALYTICS_COUNTRY_DB === undefined) return undefined;
  try {
    createCountryLookup(config.ANALYTICS_COUNTRY_DB);
    return undefined;
  } catch (error) {
    const reason = (error as NodeJS.ErrnoException).code ?? `not a MaxMind-format database: ${(error as Error).message}`;
    return `ANALYTICS_COUNTRY_DB names no country database this process can read (${reason}): set it to a MaxMind-format .mmdb file, or leave it empty for the bundled DB-IP Lite`;
  }
}

/**
 * Where the rate limits are counted, for the start's log: a REDIS_URL mistyped
 * or left out (two instances then each count alone, every budget doubled) was
 * said nowhere. The host and port only: the URL's password is never logged.
 */
function rateLimitStore(config: Config): { fields: { rateLimitStore: 'redis' | 'memory'; redis?: string }; line: string } {
  if (config.REDIS_URL === undefined) {
    return { fields: { rateLimitStore: 'memory' }, line: 'rate limits are counted in process memory (REDIS_URL unset): each instance counts alone, and a restart forgets the counts' };
  }
  const redis = URL.parse(config.REDIS_URL);
  const at = `${redis?.hostname || '127.0.0.1'}:${redis?.port || '6379'}`;
  return { fields: { rateLimitStore: 'redis', redis: at }, line: `rate limits are counted in Redis at ${at}, shared by every instance that uses it` };
}

/**
 * How long after the first shutdown signal a further one is taken for a copy
 * of it and ignored. The same stop often arrives twice: npm passes SIGINT and
 * SIGTERM on to its child, which has had the signal already from the
 * terminal's Ctrl-C or from a kill of the whole process group (systemd's
 * KillMode=control-group). That copy comes within milliseconds; a second
 * Ctrl-C meant as such, because the stop seems stuck, comes later than a second.
 */
const REPEAT_WINDOW_MS = 1_000;

async function main() {
  let config;
  try {
    config = parseConfig(process.env);
  } catch (error) {
    exitOnConfigError(error);
  }

  const countryDatabaseProblem = countryDatabaseFailure(config);
  if (countryDatabaseProblem) {
    console.error(countryDatabaseProblem);
    process.exit(1);
  }

  const patchProblem = unpatchedDependency();
  if (patchProblem) {
    console.error(patchProblem);
    process.exit(1);
  }

  const logLevel = config.LOG_LEVEL;
  let app: FastifyInstance | undefined;
  let ownLog: pino.Logger | undefined;
  /** The app's log; while the app is not built (its start refused as it was built), one written the same way. */
  const startLog = (): StartLog => app?.log ?? (ownLog ??= pino(loggerOptions(logLevel)));
  /** A login the database refuses, found as the app is built or later (app.ts, onFatal): the start ends so, exit code 1. */
  const exitOnLateConfigError = (error: unknown): never => {
    if (!(error instanceof ConfigError)) throw error;
    sayStartRefused(startLog(), logLevel, error.message);
    process.exit(1);
  };
  /**
   * Anything else that ends the build (a plugin past Fastify's pluginTimeout on
   * a machine short of CPU, a bug) is a log entry too, with its stack as a
   * field, where it was an unhandled rejection in plain text.
   */
  const exitOnBuildError = (error: unknown): never => {
    if (error instanceof ConfigError) return exitOnLateConfigError(error);
    const { code, message = String(error) } = (error ?? {}) as { code?: string; message?: string };
    const line =
      code === 'FST_ERR_PLUGIN_TIMEOUT' || code === 'AVV_ERR_PLUGIN_EXEC_TIMEOUT' || code === 'AVV_ERR_READY_TIMEOUT'
        ? `the app did not start in time (plugin ${/'[^']*'/.exec(message)?.[0] ?? 'unknown'} still loading past Fastify's pluginTimeout): the machine is short of CPU, or a start step hangs; give it more CPU, or start again`
        : `the app failed to start: ${message}`;
    if (logLevel === 'silent') console.error(line);
    else startLog().error({ err: error }, line);
    process.exit(1);
  };
  app = await buildApp({ config, onFatal: exitOnLateConfigError }).catch(exitOnBuildError);

  // SIGHUP: the terminal the server ran in was closed (an SSH session ended), which
  // ended the process on the spot, requests in flight and all, with no line in the log.
  const SHUTDOWN_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  let closing = false;
  let firstSignalAt = 0;
  let repeatLogged = false;
  let shuttingDown = false;
  let endReadinessWait: (() => void) | undefined;
  const close = async (signal: NodeJS.Signals) => {
    if (closing) {
      // A copy of the first (REPEAT_WINDOW_MS): ignored, or it would end the
      // stop it repeats, requests in flight and all.
      if (performance.now() - firstSignalAt < REPEAT_WINDOW_MS) {
        if (!repeatLogged) app.log.info({ signal, windowMs: REPEAT_WINDOW_MS }, 'a repeat of the shutdown signal ignored (a copy passed on by npm or to the process group)');
        repeatLogged = true;
        return;
      }
      // A deliberate second signal: during the readiness wait it ends the
      // wait (Ctrl-C twice); once the shutdown runs, it ends the process as
      // Node does by default, as if no handler were there.
      if (!shuttingDown) return endReadinessWait?.();
      for (const shutdownSignal of SHUTDOWN_SIGNALS) process.removeListener(shutdownSignal, onSignal);
      process.kill(process.pid, signal);
      return;
    }
    closing = true;
    firstSignalAt = performance.now();
    if (config.SHUTDOWN_DELAY_MS > 0) {
      // /health answers 503 from now on; everything else is served as before
      // until the wait ends, or a second signal ends it (Ctrl-C twice).
      app.readiness.withdrawn = true;
      app.log.info({ signal, delayMs: config.SHUTDOWN_DELAY_MS }, 'readiness withdrawn: /health answers 503 until the shutdown begins');
      await new Promise<void>((resolve) => {
        const wait = setTimeout(resolve, config.SHUTDOWN_DELAY_MS);
        endReadinessWait = () => {
          clearTimeout(wait);
          resolve();
        };
      });
    }
    // From here a deliberate further signal ends the process as Node does by default.
    shuttingDown = true;
    app.log.info({ signal }, 'shutting down');
    const { responsesMs, connectionsMs } = shutdownBudget(config.SHUTDOWN_TIMEOUT_MS);
    // Downloads and event streams still running are cut; then every connection
    // still open (a request stuck on a slow query, a slow upload) is closed.
    const cutReplies = setTimeout(() => app.cutStreamedReplies('the server is shutting down'), responsesMs);
    const cutConnections = setTimeout(() => {
      app.log.warn('closing the connections still open at the end of their shutdown budget');
      app.server.closeAllConnections();
    }, connectionsMs);
    // 'close': the last connection has ended; the onClose steps run from here on.
    app.server.once('close', () => {
      clearTimeout(cutReplies);
      clearTimeout(cutConnections);
    });
    const force = setTimeout(() => {
      app.log.error('shutdown timed out; exiting');
      process.exit(1);
    }, config.SHUTDOWN_TIMEOUT_MS);
    force.unref();
    try {
      await app.close();
      // The last line of a clean stop: a log that ends at "shutting down" ended in a crash.
      app.log.info({ signal }, 'shut down');
      process.exit(0);
    } catch (error) {
      app.log.error({ err: error }, 'error while shutting down');
      process.exit(1);
    }
  };
  const onSignal = (signal: NodeJS.Signals) => void close(signal);
  for (const signal of SHUTDOWN_SIGNALS) process.on(signal, onSignal);

  try {
    await app.listen({ port: config.PORT, host: config.HOST });
    // Which build and which rules (production's or not) this process runs, for whoever reads its log.
    app.log.info({ version: VERSION, nodeEnv: config.NODE_ENV, node: process.version }, 'portfolio-backend started');
    const store = rateLimitStore(config);
    app.log.info(store.fields, store.line);
    const nodeWarning = nodeVersionWarning(process.version);
    if (nodeWarning) app.log.warn(nodeWarning);
    for (const warning of productionWarnings(config)) app.log.warn(warning);
  } catch (error) {
    const line = listenFailure(error, config.PORT, config.HOST);
    if (!line) throw error;
    sayStartRefused(app.log, logLevel, line);
    // The workers and pools started with the app; a bounded close, then out.
    setTimeout(() => process.exit(1), 2_000).unref();
    await app.close().catch(() => {});
    process.exit(1);
  }
}

await main();
