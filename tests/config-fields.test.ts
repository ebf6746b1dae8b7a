import { describe, expect, it } from 'vitest';
import type { z } from 'zod';
import { choice, intBetween, optionalRedisUrl, optionalSecret, optionalSmtpUrl, optionalUrl, port, positiveInt, postgresUrl, url } from '../src/config-fields.ts';
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
    expect(says(positiveInt(5), '7')).toEqual([]);
  });

  it('a duration in milliseconds: at most what a timer takes, since Node fires a longer one after 1 ms', () => {
    const must = 'must be a whole number of milliseconds from 1 to 2147483647';
    expect(refusal({ SHUTDOWN_TIMEOUT_MS: '-1', AUTH_TIMEOUT_MS: '10s' })).toBe(
      `Invalid configuration: AUTH_TIMEOUT_MS is invalid (${must}); SHUTDOWN_TIMEOUT_MS is invalid (${must})`,
    );
    // "No limit" written as a large number was a limit of 1 ms.
    expect(refusal({ DATABASE_ACQUIRE_TIMEOUT_MS: '3000000000' })).toBe(`Invalid configuration: DATABASE_ACQUIRE_TIMEOUT_MS is invalid (${must})`);
    expect(parseConfig({ ...DEVELOPMENT, REQUEST_TIMEOUT_MS: '2147483647' }).REQUEST_TIMEOUT_MS).toBe(2_147_483_647);
    expect(refusal({ DATABASE_IDLE_TIMEOUT_S: '2147484' })).toBe('Invalid configuration: DATABASE_IDLE_TIMEOUT_S is invalid (must be a whole number from 1 to 2147483)');
  });

  it('retention: at most a century; a longer one put the cutoff before year 1 and every prune failed', () => {
    expect(refusal({ LOG_RETENTION_DAYS: '1000000', ANALYTICS_RETENTION_MONTHS: '1201' })).toBe(
      'Invalid configuration: LOG_RETENTION_DAYS is invalid (must be a whole number from 1 to 36500); ANALYTICS_RETENTION_MONTHS is invalid (must be a whole number from 1 to 1200)',
    );
    const longest = parseConfig({ ...DEVELOPMENT, LOG_RETENTION_DAYS: '36500', ANALYTICS_RETENTION_MONTHS: '1200' });
    expect([longest.LOG_RETENTION_DAYS, longest.ANALYTICS_RETENTION_MONTHS]).toEqual([36_500, 1_200]);
  });

  it('TRUST_PROXY: a range or hop count that would trust what the client writes is refused, in one line', () => {
    const broad = (entries: string) => `Invalid configuration: TRUST_PROXY is invalid (too broad for proxies (at most a /8 of IPv4, a /7 of IPv6): ${entries})`;
    // Together these two cover every IPv4 address; 0.0.0.0/0 made the app fail to build with a stack trace.
    expect(refusal({ TRUST_PROXY: '0.0.0.0/1,128.0.0.0/1' })).toBe(broad('0.0.0.0/1, 128.0.0.0/1'));
    expect(refusal({ TRUST_PROXY: '10.0.0.1, 0.0.0.0/0' })).toBe(broad('0.0.0.0/0'));
    // An IPv6 range holding IPv4-mapped addresses trusts IPv4 clients too.
    expect(refusal({ TRUST_PROXY: '::/0' })).toBe(broad('::/0'));
    expect(refusal({ TRUST_PROXY: '::/8' })).toBe(broad('::/8'));
    expect(refusal({ TRUST_PROXY: '::ffff:0:0/96' })).toBe(broad('::ffff:0:0/96'));
    expect(refusal({ TRUST_PROXY: '99' })).toBe(
      'Invalid configuration: TRUST_PROXY is invalid (a hop count must be at most 5: a larger one trusts X-Forwarded-For entries the client writes)',
    );
    // The widest private ranges, named ranges and a hop count of a real chain are proxies.
    for (const value of ['10.0.0.0/8', 'fc00::/7', '::ffff:10.0.0.0/104', '172.16.0.0/12, 192.168.0.0/16, loopback', '5']) {
      expect(() => parseConfig({ ...DEVELOPMENT, TRUST_PROXY: value }), value).not.toThrow();
    }
  });

  it('a port, a bounded number, a choice, a URL, a secret: each says what it must be', () => {
    expect(says(port(3000), 'eighty')).toEqual(['must be a port from 0 to 65535']);
    expect(says(port(3000), '65536')).toEqual(['must be a port from 0 to 65535']);
    expect(says(port(3000), '0')).toEqual([]);
    expect(says(intBetween(100, 100_000, 5_000), '99')).toEqual(['must be a whole number from 100 to 100000']);
    expect(says(choice(['development', 'test', 'production']), 'prod')).toEqual(['must be development, test or production']);
    expect(says(choice(['on', 'off']), 'yes')).toEqual(['must be on or off']);
    expect(says(url('http://localhost:5173'), 'localhost')).toEqual(['must be a URL such as http://localhost:5173']);
    expect(says(optionalUrl('https://api.resend.com'), 'sink')).toEqual(['must be a URL such as https://api.resend.com']);
    expect(says(optionalSecret(32), 'short')).toEqual(['must be at least 32 characters']);
    expect(says(optionalSecret(32), '')).toEqual([]);
  });

  it('SUPABASE_URL: the project URL, not the auth server\'s (its client adds /auth/v1, so sign-ins went to /auth/v1/auth/v1/token)', () => {
    for (const value of ['https://abc.supabase.co/auth/v1', 'https://abc.supabase.co/auth/v1/', 'http://127.0.0.1:54321/AUTH/V1//']) {
      expect(refusal({ SUPABASE_URL: value })).toBe(
        'Invalid configuration: SUPABASE_URL is invalid (must be the project URL such as https://<ref>.supabase.co, without /auth/v1: the client adds that itself)',
      );
    }
    // The project URL, with or without its slash, or below a path a self-hosted stack sits under.
    for (const value of ['https://abc.supabase.co', 'https://abc.supabase.co/', 'https://example.com/supabase']) {
      expect(parseConfig({ ...DEVELOPMENT, SUPABASE_URL: value }).SUPABASE_URL).toBe(value);
    }
  });

  it('EMAIL_FROM: an address, or a name and an address in <>; anything else no notification could be sent from', () => {
    for (const value of ['notanaddress', 'Portfolio no-reply@example.com', 'Portfolio <>', 'Portfolio <no-reply>', 'a@b@example.com']) {
      expect(refusal({ EMAIL_FROM: value }), value).toBe(
        'Invalid configuration: EMAIL_FROM is invalid (must be an e-mail address, or a name and an address as Portfolio <no-reply@example.com>)',
      );
    }
    for (const value of ['no-reply@example.com', 'Portfolio <no-reply@example.com>', '"Doe, Jane" <jane@example.com>', 'Portfolio <no-reply@localhost>']) {
      expect(parseConfig({ ...DEVELOPMENT, EMAIL_FROM: value }).EMAIL_FROM).toBe(value);
    }
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
    // One URL: a list passed as some URL, and every browser's preflight was refused.
    for (const value of ['https://a.example.com,https://b.example.com', 'https://a.example.com/,https://b.example.com/']) {
      expect(refusal({ CORS_ORIGIN: value })).toBe('Invalid configuration: CORS_ORIGIN is invalid (must be one URL such as http://localhost:5173, not a list (CORS allows one origin))');
    }
    // Whatever names one origin, as it always did: CORS takes its origin (a path is where e-mail links lead).
    for (const value of ['https://example.com', 'https://Example.com/', 'https://example.com:443', 'http://localhost:5173', 'http://[::1]:8080', 'https://bücher.example', 'https://example.com/app']) {
      expect(parseConfig({ ...DEVELOPMENT, CORS_ORIGIN: value }).CORS_ORIGIN).toBe(value);
    }
    expect(refusal({ METRICS_TOKEN: 'short', WEBSITE_DELETE_BATCH: '5', FEEDBACK_NOTIFY_EMAILS: 'a@example.com,nope' })).toBe(
      'Invalid configuration: METRICS_TOKEN is invalid (must be at least 16 characters); FEEDBACK_NOTIFY_EMAILS is invalid (must be e-mail addresses, comma-separated); WEBSITE_DELETE_BATCH is invalid (must be a whole number from 100 to 100000)',
    );
  });

  it('a URL a client parses itself is checked as that client reads it, and the refusal never repeats it', () => {
    const POSTGRES = 'must be a URL such as postgres://user:password@host:5432/database';
    const ESCAPE = 'a % in the user name or password must be written %25';
    // The operator's values: a bad port (postgres.js and ioredis threw `Invalid URL` with the URL, password and all), no URL, a bad escape.
    expect(refusal({ DATABASE_URL: 'postgres://portfolio_api:SuperSecretPW@127.0.0.1:54x/portfolio_dev' })).toBe(`Invalid configuration: DATABASE_URL is invalid (${POSTGRES})`);
    expect(refusal({ DATABASE_URL: 'notaurl' })).toBe(`Invalid configuration: DATABASE_URL is invalid (${POSTGRES})`);
    expect(refusal({ DATABASE_URL: 'postgres://portfolio_api:Super%zzSecretPW@127.0.0.1/portfolio_dev' })).toBe(
      `Invalid configuration: DATABASE_URL is invalid (${POSTGRES}; ${ESCAPE})`,
    );
    expect(refusal({ DATABASE_OWNER_URL: 'mysql://root:SuperSecretPW@127.0.0.1/portfolio_dev', REDIS_URL: 'redis://:SecretRedisPW@127.0.0.1:6x79' })).toBe(
      `Invalid configuration: DATABASE_OWNER_URL is invalid (${POSTGRES}); REDIS_URL is invalid (must be a URL such as redis://:password@host:6379, or rediss:// for TLS)`,
    );
    expect(refusal({ SMTP_URL: 'smtp://mailer:%zz@127.0.0.1:25', SUPABASE_URL: 'ftp://ref.supabase.co' })).toBe(
      `Invalid configuration: SUPABASE_URL is invalid (must be a URL such as https://<ref>.supabase.co); SMTP_URL is invalid (must be a URL such as smtp://127.0.0.1:54325; ${ESCAPE})`,
    );

    // What the clients take: postgres.js several hosts and a target_session_attrs it knows, ioredis a database number.
    // A Unix socket as libpq names it (src/lib/database-url.ts gives it to postgres.js): the directory as the host, percent-encoded, or a host parameter.
    for (const value of ['postgres://u:p%25w@127.0.0.1:5432/db', 'postgresql://localhost/db?sslmode=require', 'postgres://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write', 'postgres://u@%2Fvar%2Frun%2Fpostgresql:5432/db', 'postgres://u:p@localhost/db?host=/var/run/postgresql']) {
      expect(says(postgresUrl, value), value).toEqual([]);
    }
    // A login with no host at all is no URL the scripts' URL handling can read: the socket goes in a host parameter after localhost.
    for (const value of ['postgres://u:p@h1:5432,h2:54x/db', 'postgres://u:p@127.0.0.1:99999/db', 'postgres://u@127.0.0.1/db?target_session_attrs=any', 'http://127.0.0.1:5432/db', 'postgres://u@/db?host=/var/run/postgresql']) {
      expect(says(postgresUrl, value), value).toEqual([POSTGRES]);
    }
    expect(says(optionalRedisUrl, 'rediss://:p@redis.example.com:6380/2')).toEqual([]);
    expect(says(optionalRedisUrl, 'redis://127.0.0.1:6379/rate-limits')).toHaveLength(1);
    expect(says(optionalRedisUrl, '127.0.0.1:6379')).toHaveLength(1);
    expect(says(optionalSmtpUrl('smtp://127.0.0.1:54325'), 'smtps://mailer:secret@smtp.example.com:465')).toEqual([]);
    expect(says(optionalSmtpUrl('smtp://127.0.0.1:54325'), 'http://127.0.0.1:25')).toHaveLength(1);
  });
});
