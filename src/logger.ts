import pino, { type DestinationStream, type LoggerOptions } from 'pino';

// SPEC levels: error, warn, info, http, debug. pino has no `http`, so it sits
// between info (30) and debug (20).
export const LOG_LEVELS = { error: 50, warn: 40, info: 30, http: 25, debug: 20 } as const;
export type LogLevel = keyof typeof LOG_LEVELS;

/**
 * The terminal's output. pino-pretty names only the levels it is given when
 * `useOnlyCustomProps` is left on: every level but `http` printed as USERLVL.
 */
export const PRETTY = { target: 'pino-pretty', options: { colorize: true, customLevels: 'http:25', useOnlyCustomProps: false } };

/**
 * Options of the app's logger. With `persist`, entries at warn and above also
 * go to that stream (modules/logs/worker.ts stores them), whatever `level` says
 * for the output: the logger then runs at the lower of the two levels and a
 * multistream sends each line where its level belongs.
 */
export function loggerOptions(
  level: LogLevel | 'silent',
  pretty = process.stdout.isTTY,
  persist?: DestinationStream,
): LoggerOptions & { stream?: DestinationStream } {
  if (persist) {
    const output = level === 'silent' ? [] : [{ level: LOG_LEVELS[level], stream: pretty ? pino.transport(PRETTY) : pino.destination(1) }];
    const lowest = level !== 'silent' && LOG_LEVELS[level] < LOG_LEVELS.warn ? level : 'warn';
    const streams = pino.multistream([...output, { level: LOG_LEVELS.warn, stream: persist }], {
      levels: { ...pino.levels.values, http: LOG_LEVELS.http },
    });
    return { ...loggerOptions(lowest, false), stream: streams };
  }
  return {
    level,
    customLevels: { http: LOG_LEVELS.http },
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers.cookie',
        'req.headers["x-api-key"]',
        'res.headers["set-cookie"]',
        // ioredis puts the failed command on its errors, arguments and all: a refused AUTH's are
        // REDIS_URL's user and password. Every error is logged as `err` (pino files a bare one there).
        'err.command.args',
        'err.aggregateErrors[*].command.args',
      ],
      censor: '[redacted]',
    },
    ...(pretty ? { transport: PRETTY } : {}),
  };
}
