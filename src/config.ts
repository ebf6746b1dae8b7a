import { z } from 'zod';

// Every setting the service reads, parsed once at start-up. Nothing else in
// the code reads process.env; tests build a Config object directly.

const optionalString = z
  .string()
  .optional()
  .transform((value) => (value === undefined || value.trim() === '' ? undefined : value));

const positiveInt = (fallback: number) => z.coerce.number().int().positive().default(fallback);

const emailList = (value: string) =>
  value
    .split(',')
    .map((email) => email.trim())
    .filter((email) => email !== '');

export const ConfigSchema = z.object({
  NODE_ENV: z.enum(['development', 'test', 'production']).default('development'),
  PORT: z.coerce.number().int().min(0).max(65535).default(3000),
  HOST: z.string().default('127.0.0.1'),
  LOG_LEVEL: z.enum(['error', 'warn', 'info', 'http', 'debug', 'silent']).default('http'),
  TRUST_PROXY: z
    .string()
    .default('false')
    .transform((value) => value === 'true' || value === '1'),

  CORS_ORIGIN: z.url().default('http://localhost:5173'),
  FRONTEND_URL: optionalString.pipe(z.url().optional()),

  DATABASE_URL: z.string().min(1),
  DATABASE_POOL_MAX: positiveInt(10),

  SUPABASE_URL: optionalString.pipe(z.url().optional()),
  SUPABASE_ANON_KEY: optionalString,
  SUPABASE_SERVICE_ROLE_KEY: optionalString,
  SUPABASE_JWT_SECRET: optionalString,
  ADMIN_JWT_SECRET: optionalString,
  AUTH_TIMEOUT_MS: positiveInt(10_000),
  AUTH_LINK_PROVIDERS: z
    .string()
    .default('keycloak')
    .transform((value) => value.split(',').map((name) => name.trim()).filter(Boolean)),

  REDIS_URL: optionalString,
  RATE_LIMIT_REDIS_PREFIX: z.string().min(1).default('portfolio-rate-limit:'),
  RATE_LIMIT_AUTH_PER_MIN: positiveInt(10),
  RATE_LIMIT_RESET_PER_MIN: positiveInt(5),
  RATE_LIMIT_FEEDBACK_PER_15MIN: positiveInt(5),
  RATE_LIMIT_GENERAL_PER_15MIN: positiveInt(100),

  // Administration: Prometheus text at GET /metrics only when a token is set;
  // stored log entries older than the retention are pruned.
  METRICS_TOKEN: optionalString.pipe(z.string().min(16).optional()),
  LOG_RETENTION_DAYS: positiveInt(30),

  // Feedback (docs/feedback.md): bot check on submission, the notification
  // e-mail (Resend when a key is set, else SMTP) and its outbox worker.
  CAPTCHA_PROVIDER: optionalString.pipe(z.enum(['turnstile', 'hcaptcha']).default('turnstile')),
  CAPTCHA_SECRET: optionalString,
  CAPTCHA_VERIFY_URL: optionalString.pipe(z.url().optional()),
  RESEND_API_KEY: optionalString,
  RESEND_BASE_URL: optionalString.pipe(z.url().optional()),
  SMTP_URL: optionalString.pipe(z.url().optional()),
  EMAIL_FROM: optionalString.transform((value) => value ?? 'Portfolio <no-reply@localhost>'),
  ADMIN_URL: optionalString.pipe(z.url().optional()),
  FEEDBACK_NOTIFY_EMAILS: optionalString
    .refine((value) => value === undefined || emailList(value).every((email) => z.email().safeParse(email).success), {
      message: 'expected comma-separated e-mail addresses',
    })
    .transform((value) => (value === undefined ? [] : emailList(value))),
  // Unset: on, except under NODE_ENV=test (test apps share one database).
  FEEDBACK_OUTBOX_WORKER: optionalString
    .pipe(z.enum(['true', 'false']).optional())
    .transform((value) => (value === undefined ? undefined : value === 'true')),
  FEEDBACK_OUTBOX_POLL_MS: positiveInt(5_000),
  FEEDBACK_OUTBOX_RETRY_BASE_MS: positiveInt(30_000),
  FEEDBACK_OUTBOX_RETRY_MAX_MS: positiveInt(3_600_000),
  FEEDBACK_OUTBOX_MAX_ATTEMPTS: positiveInt(20),

  // Analytics (docs/analytics.md): the secret the daily visitor-hash salt is
  // derived from (required in production), and the ingestion group commit.
  ANALYTICS_SALT_SECRET: optionalString.pipe(z.string().min(32).optional()),
  ANALYTICS_BATCH_MAX_ROWS: positiveInt(500),
  ANALYTICS_BATCH_MAX_WAIT_MS: positiveInt(5),
  ANALYTICS_BATCH_MAX_IN_FLIGHT: positiveInt(2),
  ANALYTICS_QUEUE_MAX: positiveInt(20_000),
  // A MaxMind-format country database to use instead of the DB-IP Lite file the npm package ships.
  ANALYTICS_COUNTRY_DB: optionalString,
  // Raw events older than this many months are deleted (rollups keep the figures), in batches of this many rows.
  ANALYTICS_RETENTION_MONTHS: positiveInt(13),
  ANALYTICS_RETENTION_BATCH: z.coerce.number().int().min(100).max(100_000).default(5_000),

  BODY_LIMIT_BYTES: positiveInt(1024 * 1024),
  SHUTDOWN_TIMEOUT_MS: positiveInt(10_000),
});

export type Config = z.output<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;

export class ConfigError extends Error {}

/** Parses settings; the error names each bad variable on one line. */
export function parseConfig(env: Record<string, string | undefined>): Config {
  const result = ConfigSchema.safeParse(env);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => {
      const name = issue.path.join('.');
      return env[name] === undefined ? `${name} is missing` : `${name} is invalid (${issue.message})`;
    });
    throw new ConfigError(`Invalid configuration: ${problems.join('; ')}`);
  }
  return result.data;
}

/** The front end's origin, which links in e-mails point at. */
export function frontendUrl(config: Config): string {
  return config.FRONTEND_URL ?? config.CORS_ORIGIN;
}
