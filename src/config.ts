import { z } from 'zod';

// Every setting the service reads, parsed once at start-up. Nothing else in
// the code reads process.env; tests build a Config object directly.

const optionalString = z
  .string()
  .optional()
  .transform((value) => (value === undefined || value.trim() === '' ? undefined : value));

const positiveInt = (fallback: number) => z.coerce.number().int().positive().default(fallback);

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

  REDIS_URL: optionalString,
  RATE_LIMIT_AUTH_PER_MIN: positiveInt(10),
  RATE_LIMIT_RESET_PER_MIN: positiveInt(5),
  RATE_LIMIT_FEEDBACK_PER_15MIN: positiveInt(5),
  RATE_LIMIT_GENERAL_PER_15MIN: positiveInt(100),

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
