import type { LoggerOptions } from 'pino';

// SPEC levels: error, warn, info, http, debug. pino has no `http`, so it sits
// between info (30) and debug (20).
export const LOG_LEVELS = { error: 50, warn: 40, info: 30, http: 25, debug: 20 } as const;
export type LogLevel = keyof typeof LOG_LEVELS;

export function loggerOptions(level: LogLevel | 'silent', pretty = process.stdout.isTTY): LoggerOptions {
  return {
    level,
    customLevels: { http: LOG_LEVELS.http },
    redact: {
      paths: [
        'req.headers.authorization',
        'req.headers.cookie',
        'req.headers["x-api-key"]',
        'res.headers["set-cookie"]',
      ],
      censor: '[redacted]',
    },
    ...(pretty ? { transport: { target: 'pino-pretty', options: { colorize: true, customLevels: 'http:25' } } } : {}),
  };
}
