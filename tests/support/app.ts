import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { inject } from 'vitest';
import { buildApp } from '../../src/app.ts';
import { type Config, type ConfigInput, parseConfig } from '../../src/config.ts';
import { asLoginRole } from '../../src/lib/database-url.ts';

import { TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './secrets.ts';

export { TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET };

/** Config for a test app against this run's stack; limits are high unless a test lowers them. */
export function testConfig(overrides: Partial<Record<keyof ConfigInput, string>> = {}): Config {
  const stack = inject('stack');
  const config = {
    NODE_ENV: 'test',
    LOG_LEVEL: 'silent',
    DATABASE_URL: stack.databaseUrl,
    SUPABASE_JWT_SECRET: TEST_JWT_SECRET,
    ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
    RATE_LIMIT_AUTH_PER_MIN: '10000',
    RATE_LIMIT_RESET_PER_MIN: '10000',
    RATE_LIMIT_ACCOUNT_PER_MIN: '10000',
    RATE_LIMIT_FEEDBACK_PER_15MIN: '10000',
    RATE_LIMIT_GENERAL_PER_15MIN: '10000',
    RATE_LIMIT_INGEST_PER_15MIN: '100000',
    // Production refuses to start without these (src/config-production.ts).
    ...(overrides.NODE_ENV === 'production'
      ? { ANALYTICS_SALT_SECRET: 'test-analytics-salt-secret-0123456789abcdef', CAPTCHA_PROVIDER: 'off' }
      : {}),
    ...overrides,
  };
  // The app connects as the API's login role, never as the owner the stack migrates with.
  return parseConfig({ ...config, DATABASE_URL: config.DATABASE_URL && asLoginRole(config.DATABASE_URL) });
}

/**
 * Builds the app (never the process) with its own Redis key namespace.
 * `extend` registers extra routes, for tests of cross-cutting plugins.
 */
export async function buildTestApp(
  overrides: Parameters<typeof testConfig>[0] = {},
  extend?: (app: FastifyInstance) => Promise<void>,
): Promise<FastifyInstance> {
  return buildApp(
    { config: testConfig(overrides), rateLimit: { redisNamespace: `test-rate-limit:${randomBytes(6).toString('hex')}:` } },
    { extend },
  );
}

/**
 * Builds the app with its log captured: `lines` holds each JSON line as
 * written, for the tests of what the log says (or must never say).
 */
export async function buildTestAppWithLog(
  overrides: Parameters<typeof testConfig>[0] = {},
  level = 'info',
  extend?: (app: FastifyInstance) => Promise<void>,
): Promise<{ app: FastifyInstance; lines: string[] }> {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      lines.push(String(chunk));
      done();
    },
  });
  const app = await buildApp(
    { config: testConfig(overrides), rateLimit: { redisNamespace: `test-logged:${randomBytes(6).toString('hex')}:` } },
    { logger: { level, customLevels: { http: 25 }, stream }, extend },
  );
  return { app, lines };
}
