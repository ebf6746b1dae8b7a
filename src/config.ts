import { randomBytes } from 'node:crypto';
import { z } from 'zod';
import {
  choice,
  emailList,
  intBetween,
  MAX_TIMER_MS,
  milliseconds,
  optionalEmailSender,
  optionalHostnameList,
  optionalIntBetween,
  optionalRedisUrl,
  optionalSecret,
  optionalSmtpUrl,
  optionalSupabaseUrl,
  optionalString,
  optionalTurnstileAction,
  optionalUrl,
  origin,
  port,
  positiveInt,
  postgresUrl,
  trustProxySetting,
  url,
} from './config-fields.ts';
import { productionProblems } from './config-production.ts';

// Every setting the service reads, parsed once at start-up. Only server.ts
// reads the environment, and parses it here; scripts parse the few settings
// they use through parseSettings, tests build a Config with parseConfig.

/** The sender of notification e-mails in development; production refuses it when e-mail is sent (config-production.ts). */
export const DEFAULT_EMAIL_FROM = 'Portfolio <no-reply@localhost>';

/** A front end's dev server (Vite's default port). */
export const DEFAULT_CORS_ORIGIN = 'http://localhost:5173';

/** Every setting as written; ConfigSchema adds what production requires. */
export const SettingsSchema = z.object({
  // Unset means production: HSTS, Secure cookies and the secret checks of
  // config-production.ts. `npm run dev` and the tests say otherwise explicitly.
  NODE_ENV: choice(['development', 'test', 'production']).default('production'),
  PORT: port(3000),
  HOST: z.string().default('127.0.0.1'),
  LOG_LEVEL: choice(['error', 'warn', 'info', 'http', 'debug', 'silent']).default('http'),
  // Which X-Forwarded-For entries to believe (Fastify's trustProxy): false,
  // a hop count, or the proxies' addresses / CIDR ranges. `true` would
  // believe every entry, so a client could pick its own IP; it is refused.
  TRUST_PROXY: trustProxySetting,
  CORS_ORIGIN: origin(DEFAULT_CORS_ORIGIN).default(DEFAULT_CORS_ORIGIN),
  FRONTEND_URL: optionalUrl('https://example.com'),

  // A login role that can only switch to anon, authenticated and service_role
  // (plugins/db.ts refuses the owner or a superuser in production).
  DATABASE_URL: postgresUrl,
  // The owner's connection, for scripts/migrate.ts and scripts/role.ts
  // only (they read it themselves); the API never connects with it.
  DATABASE_OWNER_URL: optionalString.pipe(postgresUrl.optional()),
  DATABASE_POOL_MAX: positiveInt(10),
  // Past either deadline the caller gets 503 instead of waiting behind a slow
  // query or a held lock (plugins/db.ts).
  DATABASE_STATEMENT_TIMEOUT_MS: milliseconds(5_000),
  DATABASE_ACQUIRE_TIMEOUT_MS: milliseconds(5_000),
  // A pooled connection idle this long is closed. A new one costs a connection
  // and each statement's and trigger's first run on it (tens of ms), which a
  // quiet site paid on most requests when this was 30 s and no outbox worker
  // kept a connection open (docs/performance.md, "After a quiet spell").
  DATABASE_IDLE_TIMEOUT_S: intBetween(1, Math.floor(MAX_TIMER_MS / 1000), 600),
  // A streamed CSV download whose client has not taken a write within this
  // long is cut off: the analytics series, read through a cursor, holds a
  // connection meanwhile, and a paused download should not keep it, nor the
  // feedback export's place in memory, for good (lib/csv.ts).
  EXPORT_STALL_MS: milliseconds(30_000),

  SUPABASE_URL: optionalSupabaseUrl('https://<ref>.supabase.co'),
  SUPABASE_ANON_KEY: optionalString,
  SUPABASE_SERVICE_ROLE_KEY: optionalString,
  SUPABASE_JWT_SECRET: optionalString,
  // HS256 keys shorter than the hash output are guessable offline from one token.
  ADMIN_JWT_SECRET: optionalString.pipe(
    z
      .string()
      .refine((value) => Buffer.byteLength(value, 'utf8') >= 32, 'must be at least 32 bytes')
      .optional(),
  ),
  // `off` refuses every legacy admin token (SPEC 5.5), whatever ADMIN_JWT_SECRET says.
  LEGACY_ADMIN_TOKEN: optionalString.pipe(choice(['on', 'off']).default('on')),
  // /docs (the OpenAPI document and its explorer): public by default, for the front end's developers.
  API_DOCS: optionalString.pipe(choice(['on', 'off']).default('on')),
  AUTH_TIMEOUT_MS: milliseconds(10_000),
  AUTH_LINK_PROVIDERS: z
    .string()
    .default('keycloak')
    .transform((value) => value.split(',').map((name) => name.trim()).filter(Boolean)),

  REDIS_URL: optionalRedisUrl,
  RATE_LIMIT_REDIS_PREFIX: z.string().min(1).default('portfolio-rate-limit:'),
  // Longest wait for Redis on one command; past it the request is counted in the process.
  REDIS_COMMAND_TIMEOUT_MS: milliseconds(250),
  RATE_LIMIT_AUTH_PER_MIN: positiveInt(10),
  RATE_LIMIT_RESET_PER_MIN: positiveInt(5),
  // SPEC section 8's "authentication (summary)": the auth routes other than
  // sign up, sign in and reset (refresh, sign out, update password, me, link).
  RATE_LIMIT_ACCOUNT_PER_MIN: positiveInt(10),
  RATE_LIMIT_FEEDBACK_PER_15MIN: positiveInt(5),
  RATE_LIMIT_GENERAL_PER_15MIN: positiveInt(100),
  // Analytics events (POST /api/analytics) have a budget of their own: a page
  // view is not an API call, and one visitor reading 100 pages, or an office
  // behind one NAT, must not be refused nor spend the general budget.
  RATE_LIMIT_INGEST_PER_15MIN: positiveInt(1_000),
  // Reset-token redemptions (update-password past its password checks) per
  // window across every client; 0, the default, counts none. It bounds this
  // route only: the auth server's own /verify takes the same token, so the
  // 10-digit code is what stops guessing (modules/auth/reset-token-budget.ts,
  // docs/accounts.md).
  RESET_TOKEN_ATTEMPTS_PER_WINDOW: intBetween(0, 1_000_000, 0),
  RESET_TOKEN_WINDOW_MS: intBetween(1_000, 86_400_000, 60_000),

  // Administration: Prometheus text at GET /metrics only when a token is set;
  // stored log entries older than the retention are pruned.
  METRICS_TOKEN: optionalSecret(16),
  // A century at most: a "keep for ever" of a million days put the cutoff
  // before year 1, which PostgreSQL refuses, and every hourly prune failed.
  LOG_RETENTION_DAYS: intBetween(1, 36_500, 30),
  // How often an open /admin/status stream checks that its admin is still
  // signed in and still an admin (a stream otherwise outlives both).
  ADMIN_STREAM_RECHECK_MS: milliseconds(30_000),

  // Feedback (docs/feedback.md): bot check on submission, the notification
  // e-mail (Resend when a key is set, else SMTP) and its outbox worker.
  // `off` switches the bot check off by name (production refuses to run without a secret otherwise).
  CAPTCHA_PROVIDER: optionalString.pipe(choice(['turnstile', 'hcaptcha', 'off']).default('turnstile')),
  CAPTCHA_SECRET: optionalString,
  CAPTCHA_VERIFY_URL: optionalUrl('https://challenges.cloudflare.com/turnstile/v0/siteverify'),
  // Site keys are public, so a token solved on any page that uses ours passes
  // siteverify: a passed token counts only when solved on one of these hosts
  // (and, for Turnstile, for this action). Empty: not checked (docs/feedback.md).
  CAPTCHA_HOSTNAMES: optionalHostnameList,
  CAPTCHA_ACTION: optionalTurnstileAction,
  RESEND_API_KEY: optionalString,
  RESEND_BASE_URL: optionalUrl('https://api.resend.com'),
  SMTP_URL: optionalSmtpUrl('smtp://127.0.0.1:54325'),
  EMAIL_FROM: optionalEmailSender.transform((value) => value ?? DEFAULT_EMAIL_FROM),
  ADMIN_URL: optionalUrl('https://example.com/admin'),
  FEEDBACK_NOTIFY_EMAILS: optionalString
    .refine((value) => value === undefined || emailList(value).every((email) => z.email().safeParse(email).success), {
      message: 'must be e-mail addresses, comma-separated',
    })
    .transform((value) => (value === undefined ? [] : emailList(value))),
  // Unset: on, except under NODE_ENV=test (test apps share one database).
  FEEDBACK_OUTBOX_WORKER: optionalString
    .pipe(choice(['true', 'false']).optional())
    .transform((value) => (value === undefined ? undefined : value === 'true')),
  FEEDBACK_OUTBOX_POLL_MS: milliseconds(5_000),
  FEEDBACK_OUTBOX_RETRY_BASE_MS: milliseconds(30_000),
  FEEDBACK_OUTBOX_RETRY_MAX_MS: milliseconds(3_600_000),
  FEEDBACK_OUTBOX_MAX_ATTEMPTS: positiveInt(20),
  // Notification e-mails per hour across every instance; past it, the
  // notifications wait and go out together in a digest (docs/feedback.md).
  // 0: no cap. Unset: 30, except under NODE_ENV=test (none: test apps share
  // one database, and the cap would count every file's notifications).
  FEEDBACK_NOTIFICATIONS_PER_HOUR: optionalIntBetween(0, 1_000_000),
  // Submissions with a screenshot (bodies over 64 KiB) handled at once per
  // process; others wait up to 3 s, then 503 (modules/feedback/screenshot-slots.ts).
  // Below DATABASE_POOL_MAX (ConfigSchema); unset, screenshotsAtOnceFor's.
  FEEDBACK_SCREENSHOTS_AT_ONCE: optionalIntBetween(1, 1_000),

  // Analytics (docs/analytics.md): the secret the daily visitor-hash salt is
  // derived from (required in production), and the ingestion group commit.
  ANALYTICS_SALT_SECRET: optionalSecret(32),
  ANALYTICS_BATCH_MAX_ROWS: positiveInt(500),
  ANALYTICS_BATCH_MAX_WAIT_MS: milliseconds(5),
  ANALYTICS_BATCH_MAX_IN_FLIGHT: positiveInt(2),
  ANALYTICS_QUEUE_MAX: positiveInt(20_000),
  ANALYTICS_QUEUE_MAX_WAIT_MS: milliseconds(2_000),
  // A MaxMind-format country database to use instead of the DB-IP Lite file the npm package ships.
  ANALYTICS_COUNTRY_DB: optionalString,
  // Raw events older than this many months are deleted (rollups keep the figures), in batches of this many rows.
  ANALYTICS_RETENTION_MONTHS: intBetween(1, 1_200, 13),
  ANALYTICS_RETENTION_BATCH: intBetween(100, 100_000, 5_000),
  // A website is deleted in batches of this many rows, each its own short
  // statement, so no statement grows with the website (docs/analytics.md).
  WEBSITE_DELETE_BATCH: intBetween(100, 100_000, 5_000),
  // DELETE /api/websites/:id waits this long for those batches, then answers
  // 202 while they go on in the background (0: never waits). Five seconds
  // cover a website of some 100,000 events, and stay far below the 30–60 s
  // after which a proxy answers 502/504 for a deletion that goes on anyway.
  WEBSITE_DELETE_WAIT_MS: intBetween(0, 60_000, 5_000),

  BODY_LIMIT_BYTES: positiveInt(1024 * 1024),
  // The whole request, headers and body, must arrive within this long; then
  // 408 and the connection is closed. Fastify switched Node's own limit off,
  // so a client sending a body a byte at a time held its connection, and the
  // body read so far, for as long as it liked. Two minutes carries a 7 MB
  // screenshot at 500 kbit/s. A large answer gets as long to be taken
  // (plugins/graceful.ts).
  REQUEST_TIMEOUT_MS: milliseconds(120_000),
  SHUTDOWN_TIMEOUT_MS: milliseconds(10_000),
  // Between the signal and the close, /health answers 503 while every other
  // route is still served, so a load balancer or an orchestrator that polls
  // it stops sending requests before the listener goes away (a platform that
  // removes the instance from rotation at its own pace sent requests to a
  // closed port). Not part of SHUTDOWN_TIMEOUT_MS.
  SHUTDOWN_DELAY_MS: intBetween(0, 300_000, 0),
});

export type Settings = z.output<typeof SettingsSchema>;

/**
 * FEEDBACK_SCREENSHOTS_AT_ONCE when unset: 2, fewer on a pool of 2 or less,
 * so that a connection stays free for everything else (at least 1: a pool of
 * one connection has none to spare).
 */
const screenshotsAtOnceFor = (poolMax: number) => Math.max(1, Math.min(2, poolMax - 1));

/**
 * The service's configuration: the settings, refused when production lacks
 * a secret it needs (config-production.ts) or settings that contradict each
 * other. The visitor-hash salt then always has a value (outside production,
 * a random one for this process), and so does FEEDBACK_SCREENSHOTS_AT_ONCE.
 */
export const ConfigSchema = SettingsSchema.superRefine(
  (settings, context) => {
    for (const { setting, phrase } of productionProblems(settings)) {
      context.addIssue({ code: 'custom', path: [setting], message: phrase, params: { phrase: true } });
    }
    // hCaptcha's siteverify answers no action: expecting one would refuse every token.
    if (settings.CAPTCHA_ACTION !== undefined && settings.CAPTCHA_PROVIDER === 'hcaptcha') {
      context.addIssue({ code: 'custom', path: ['CAPTCHA_ACTION'], message: "Turnstile's only: hCaptcha answers no action, so every token would be refused" });
    }
    // Each submission with a screenshot holds a pooled connection while it is
    // stored; with every one held, /health answered 503 and every other
    // request waited for a connection (docs/feedback.md). Either one bad is
    // named above as written, a string here.
    const { FEEDBACK_SCREENSHOTS_AT_ONCE: screenshots, DATABASE_POOL_MAX: poolMax } = settings;
    if (typeof screenshots === 'number' && typeof poolMax === 'number' && screenshots >= poolMax) {
      context.addIssue({
        code: 'custom',
        path: ['FEEDBACK_SCREENSHOTS_AT_ONCE'],
        message: `must be below DATABASE_POOL_MAX (${poolMax}): each submission with a screenshot holds a database connection, and with all of them held every other request waits`,
      });
    }
  },
  {
    // Also when other settings are bad, so that one failed start names every
    // problem. A bad setting is then seen here as it was written (a secret set
    // too short counts as given: it is named once, as invalid). Not when
    // NODE_ENV itself is bad: whether production's rules apply is unknown.
    when: (payload) => !payload.issues.some((issue) => issue.path?.[0] === 'NODE_ENV'),
  },
).transform((settings) => ({
  ...settings,
  ANALYTICS_SALT_SECRET: settings.ANALYTICS_SALT_SECRET ?? randomBytes(32).toString('hex'),
  FEEDBACK_SCREENSHOTS_AT_ONCE: settings.FEEDBACK_SCREENSHOTS_AT_ONCE ?? screenshotsAtOnceFor(settings.DATABASE_POOL_MAX),
}));

export type Config = z.output<typeof ConfigSchema>;
export type ConfigInput = z.input<typeof ConfigSchema>;

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

/**
 * Parses `env` with `schema`; the error names each bad variable, all on one
 * line. A variable set to nothing (`PORT=` in a .env copied from
 * .env.example) counts as unset, so it takes its default like any other.
 */
function parseWith<T>(schema: z.ZodType<T>, given: Env): T {
  const env = withoutEmptyValues(given);
  const result = schema.safeParse(env);
  if (result.success) return result.data;
  const problems = result.error.issues.map((issue) => {
    // Production's own checks write a whole phrase that names the variable.
    if (issue.code === 'custom' && issue.params?.phrase) return issue.message;
    const name = issue.path.join('.');
    return env[name] === undefined ? `${name} is missing` : `${name} is invalid (${issue.message})`;
  });
  throw new ConfigError(`Invalid configuration: ${problems.join('; ')}`);
}

/** `env` without the variables set to nothing, which mean unset here. */
export function withoutEmptyValues<T extends Env>(env: T): T {
  return Object.fromEntries(Object.entries(env).filter(([, value]) => value?.trim() !== '')) as T;
}

/** The whole configuration, for the service (server.ts) and its tests. */
export function parseConfig(env: Env): Config {
  return parseWith(ConfigSchema, env);
}

/** Only the named settings, by the same rules and with the same one-line error; for scripts that need a few. */
export function parseSettings(env: Env, names: readonly (keyof Settings)[]): Partial<Settings> {
  const named: Env = Object.fromEntries(names.map((name) => [name, env[name]]));
  return parseWith(SettingsSchema.partial(), named);
}

type FrontEndSettings = Pick<Config, 'FRONTEND_URL' | 'CORS_ORIGIN'>;

/** The front end's address, which links in e-mails point at. */
export function frontendUrl(config: FrontEndSettings): string {
  return config.FRONTEND_URL ?? config.CORS_ORIGIN;
}

/** Where a password-reset e-mail's link leads: the front end's /reset-password, below FRONTEND_URL's own path. */
export function resetPasswordUrl(config: FrontEndSettings): string {
  return `${frontendUrl(config).replace(/\/+$/, '')}/reset-password`;
}
