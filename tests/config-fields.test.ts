import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { choice, intBetween, optionalSecret, optionalUrl, port, positiveInt, url } from '../src/config-fields.ts';
import { parseConfig } from '../src/config.ts';

// A bad setting is refused with what it must be, in our words, as
// ADMIN_JWT_SECRET's `must be at least 32 bytes` always was: never zod's own
// text (`Too small: expected string to have >=32 characters`).

const DEVELOPMENT = { NODE_ENV: 'development', DATABASE_URL: 'postgres://x@127.0.0.1/x' };

/** The one config line parseConfig refuses `env` with. */
function refusal(env: Record<string, string>): string {
  try {
    parseConfig({ ...DEVELOPMENT, ...env });
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('accepted');
}

/** What `field` says of `value`. */
function says(field: z.ZodType, value: string): string[] {
  const result = field.safeParse(value);
  return result.success ? [] : result.error.issues.map((issue) => issue.message);
}

describe('configuration messages', () => {
  it('a positive whole number: not a number, zero, a fraction', () => {
    for (const value of ['many', '0', '2.5']) {
      expect(refusal({ DATABASE_POOL_MAX: value })).toBe('Invalid configuration: DATABASE_POOL_MAX is invalid (must be a positive whole number)');
    }
    expect(refusal({ SHUTDOWN_TIMEOUT_MS: '-1', AUTH_TIMEOUT_MS: '10s' })).toBe(
      'Invalid configuration: AUTH_TIMEOUT_MS is invalid (must be a positive whole number); SHUTDOWN_TIMEOUT_MS is invalid (must be a positive whole number)',
    );
    expect(says(positiveInt(5), '7')).toEqual([]);
  });

  it('a port, a bounded number, a choice, a URL, a secret: each says what it must be', () => {
    expect(says(port(3000), 'eighty')).toEqual(['must be a port from 0 to 65535']);
    expect(says(port(3000), '65536')).toEqual(['must be a port from 0 to 65535']);
    expect(says(port(3000), '0')).toEqual([]);
    expect(says(intBetween(100, 100_000, 5_000), '99')).toEqual(['must be a whole number from 100 to 100000']);
    expect(says(choice(['development', 'test', 'production']), 'prod')).toEqual(['must be development, test or production']);
    expect(says(choice(['on', 'off']), 'yes')).toEqual(['must be on or off']);
    expect(says(url('http://localhost:5173'), 'localhost')).toEqual(['must be a URL such as http://localhost:5173']);
    expect(says(optionalUrl('smtp://127.0.0.1:54325'), 'sink')).toEqual(['must be a URL such as smtp://127.0.0.1:54325']);
    expect(says(optionalSecret(32), 'short')).toEqual(['must be at least 32 characters']);
    expect(says(optionalSecret(32), '')).toEqual([]);
  });

  it("the settings config.ts defines itself: PORT, NODE_ENV, LOG_LEVEL, URLs, tokens, batches", () => {
    expect(refusal({ PORT: 'eighty' })).toBe('Invalid configuration: PORT is invalid (must be a port from 0 to 65535)');
    expect(refusal({ ANALYTICS_SALT_SECRET: 'short' })).toBe('Invalid configuration: ANALYTICS_SALT_SECRET is invalid (must be at least 32 characters)');
    expect(refusal({ NODE_ENV: 'prod' })).toBe('Invalid configuration: NODE_ENV is invalid (must be development, test or production)');
    expect(refusal({ LOG_LEVEL: 'loud', LEGACY_ADMIN_TOKEN: 'maybe', FEEDBACK_OUTBOX_WORKER: 'yes' })).toBe(
      'Invalid configuration: LOG_LEVEL is invalid (must be error, warn, info, http, debug or silent); LEGACY_ADMIN_TOKEN is invalid (must be on or off); FEEDBACK_OUTBOX_WORKER is invalid (must be true or false)',
    );
    expect(refusal({ CORS_ORIGIN: 'localhost', SMTP_URL: 'sink' })).toBe(
      'Invalid configuration: CORS_ORIGIN is invalid (must be a URL such as http://localhost:5173); SMTP_URL is invalid (must be a URL such as smtp://127.0.0.1:54325)',
    );
    expect(refusal({ METRICS_TOKEN: 'short', WEBSITE_DELETE_BATCH: '5', FEEDBACK_NOTIFY_EMAILS: 'a@example.com,nope' })).toBe(
      'Invalid configuration: METRICS_TOKEN is invalid (must be at least 16 characters); FEEDBACK_NOTIFY_EMAILS is invalid (must be e-mail addresses, comma-separated); WEBSITE_DELETE_BATCH is invalid (must be a whole number from 100 to 100000)',
    );
  });
});
