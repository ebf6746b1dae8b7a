import { randomBytes } from 'node:crypto';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { type Config, parseConfig, parseSettings, resetPasswordUrl, type Settings, SettingsSchema, withoutEmptyValues } from '../src/config.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { devOwnerUrl } from './owner-hint.ts';
import type { AuthServer } from './stack/auth-server.ts';
import type { AuthSettings } from './stack/supabase-config.ts';
import { ROOT } from './stack/database.ts';
import { localPostgresUrl } from './stack/index.ts';
import type { MailSink } from './stack/mail-sink.ts';

// What `npm run dev` gives the API: the environment as .env and the shell
// set it, filled in and overridden by the local stack, and checked before
// anything starts. Its fixed ports and the secrets it keeps between runs.

/** The ports `supabase start` uses, so URLs look the same with either. */
export const DEV_PORTS = { gateway: 54321, mailApi: 54324, smtp: 54325, oidcIssuer: 54326 };
export const SECRETS_FILE = path.join(ROOT, '.cache/dev-secrets.json');

export interface DevSecrets {
  SUPABASE_JWT_SECRET: string;
  ADMIN_JWT_SECRET: string;
  ANALYTICS_SALT_SECRET: string;
  OIDC_CLIENT_SECRET: string;
}

/** Secrets for the local stack, made once and kept in the git-ignored cache. */
export async function devSecrets(): Promise<DevSecrets> {
  const fresh = (): DevSecrets => ({
    SUPABASE_JWT_SECRET: randomBytes(32).toString('hex'),
    ADMIN_JWT_SECRET: randomBytes(32).toString('hex'),
    ANALYTICS_SALT_SECRET: randomBytes(32).toString('hex'),
    OIDC_CLIENT_SECRET: randomBytes(24).toString('hex'),
  });
  let kept: Partial<DevSecrets> = {};
  try {
    kept = JSON.parse(await readFile(SECRETS_FILE, 'utf8'));
  } catch {
    // First run: made below.
  }
  const secrets = { ...fresh(), ...kept };
  if (Object.keys(kept).length !== Object.keys(secrets).length) {
    await mkdir(path.dirname(SECRETS_FILE), { recursive: true });
    await writeFile(SECRETS_FILE, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  }
  return secrets;
}

/**
 * supabase/config.toml's auth settings, allowing the reset link of the front
 * end .env names: the auth server sends a reset link only to an address it
 * allows (any on loopback, else those listed), and otherwise to its site URL,
 * which is no page of ours.
 */
export function withFrontEnd(auth: AuthSettings, frontEnd: Pick<Config, 'FRONTEND_URL' | 'CORS_ORIGIN'>): AuthSettings {
  return { ...auth, redirectUrls: [...new Set([...auth.redirectUrls, resetPasswordUrl(frontEnd)])] };
}

/**
 * The server's environment before the stack fills it: development unless
 * .env says otherwise (unset NODE_ENV means production, src/config.ts); a
 * variable set to nothing (as .env.example leaves many) is unset.
 */
export function serverEnv(given: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { NODE_ENV: 'development', ...withoutEmptyValues(given) };
}

/** What of the local stack the API's environment takes. */
export interface StackValues {
  databaseUrl: string;
  mail: Pick<MailSink, 'smtpPort'>;
  auth?: Pick<AuthServer, 'url' | 'anonKey' | 'serviceRoleKey' | 'jwtSecret'>;
}

/**
 * `env` with the local stack's values where .env left them empty. The stack's
 * database replaces whatever .env gives (it is the one the stack migrated, and
 * the one its auth server writes accounts to), and so do the stack's own auth
 * server's URL, keys and JWT secret (a hosted project's, left over): it signs
 * every token with its secret, and an API verifying with another answers each
 * one 401. `overridden` names the variables whose .env value was replaced.
 */
export function withStack(env: NodeJS.ProcessEnv, stack: StackValues, secrets: DevSecrets): { env: NodeJS.ProcessEnv; overridden: string[] } {
  const filled = { ...env };
  const overridden: string[] = [];
  const fromStack: Record<string, string> = {
    // The API logs in as `authenticator` (only anon, authenticated, service_role);
    // the stack migrated as the owner, and owner-level scripts use DATABASE_OWNER_URL.
    DATABASE_URL: asLoginRole(stack.databaseUrl),
    DATABASE_OWNER_URL: stack.databaseUrl,
    ...(stack.auth && {
      SUPABASE_URL: stack.auth.url,
      SUPABASE_ANON_KEY: stack.auth.anonKey,
      SUPABASE_SERVICE_ROLE_KEY: stack.auth.serviceRoleKey,
      SUPABASE_JWT_SECRET: stack.auth.jwtSecret,
    }),
  };
  for (const [name, value] of Object.entries(fromStack)) {
    if (filled[name] !== undefined && filled[name] !== value) overridden.push(name);
    filled[name] = value;
  }
  // Without an auth server no token is issued here: a secret .env gives may stay.
  filled.SUPABASE_JWT_SECRET ??= secrets.SUPABASE_JWT_SECRET;
  filled.ADMIN_JWT_SECRET ??= secrets.ADMIN_JWT_SECRET;
  filled.ANALYTICS_SALT_SECRET ??= secrets.ANALYTICS_SALT_SECRET;
  filled.SMTP_URL ??= `smtp://127.0.0.1:${stack.mail.smtpPort}`;
  // A fresh local database has no admin yet: notifications go to this address in the sink.
  filled.FEEDBACK_NOTIFY_EMAILS ??= 'admin@portfolio.local';
  return { env: filled, overridden };
}

/**
 * Parses the configuration the server will be given, before anything starts:
 * a bad value ends `npm run dev` at once, not after the stack is up and the
 * banner printed. With the local stack (`local`), what withStack fills in is
 * stood in for, so only the values of .env and the environment are judged.
 */
export function checkServerConfig(env: NodeJS.ProcessEnv, local?: { auth: boolean }): void {
  if (!local) {
    parseConfig(env);
    return;
  }
  const standIn = 'x'.repeat(64);
  const stack: StackValues = {
    databaseUrl: devOwnerUrl(localPostgresUrl(env)),
    mail: { smtpPort: DEV_PORTS.smtp },
    auth: local.auth ? { url: `http://127.0.0.1:${DEV_PORTS.gateway}`, anonKey: standIn, serviceRoleKey: standIn, jwtSecret: standIn } : undefined,
  };
  const secrets: DevSecrets = { SUPABASE_JWT_SECRET: standIn, ADMIN_JWT_SECRET: standIn, ANALYTICS_SALT_SECRET: standIn, OIDC_CLIENT_SECRET: standIn };
  parseConfig(withStack(env, stack, secrets).env);
}

/** The budgets (RATE_LIMIT_<name>_PER_<window>), read off the settings so that a new one is named too. */
const RATE_LIMITS = (Object.keys(SettingsSchema.shape) as (keyof Settings)[]).filter((name) => /^RATE_LIMIT_\w+_PER_/.test(name));

/**
 * What the banner says of the rate limits: production's, or which budgets
 * .env (or the shell) set otherwise. A front end's developer refused with 429
 * reads there whether the limits are the ones in force.
 */
export function rateLimitNote(env: NodeJS.ProcessEnv): string {
  const given = parseSettings(env, RATE_LIMITS);
  const production = parseSettings({}, RATE_LIMITS);
  const changed = RATE_LIMITS.filter((name) => given[name] !== production[name]);
  if (changed.length === 0) return 'rate limits as in production, RATE_LIMIT_* in .env raise them';
  return `rate limits not production's: ${changed.map((name) => `${name}=${given[name]}`).join(', ')}`;
}
