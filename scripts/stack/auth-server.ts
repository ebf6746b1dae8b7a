import { type ChildProcess, spawn } from 'node:child_process';
import { accessSync, constants, mkdirSync } from 'node:fs';
import path from 'node:path';
import { SignJWT } from 'jose';
import { ROOT } from './database.ts';
import { freePort } from './free-port.ts';
import { startGateway, type Gateway } from './gateway.ts';
import { startOidcIssuer, type OidcIssuer } from './oidc-issuer.ts';
import { AUTH_BIN_VARIABLE, stackEnvironment } from './environment.ts';
import type { AuthSettings } from './supabase-config.ts';

// Supabase Auth in the local stack. The project never builds it: it runs the
// binary it is given (SUPABASE_AUTH_BIN, else `gotrue` on the PATH), applies
// the binary's own migrations to the stack's database as supabase_auth_admin,
// and serves it behind the gateway at /auth/v1, with the test OIDC issuer as
// its `keycloak` provider.

export { AUTH_BIN_VARIABLE } from './environment.ts';

/**
 * The binary's working directory: one with no `.env`. It reads `./.env`
 * itself, and the project's (PORT, DATABASE_URL…) would override the port and
 * database the stack gives it.
 */
const AUTH_WORKDIR = path.join(ROOT, '.cache/auth-server');

/** Where the gateway serves the auth server, as Kong does under `supabase start`. */
const AUTH_PATH = '/auth/v1';

export class AuthBinaryError extends Error {}

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The Supabase Auth binary to run: SUPABASE_AUTH_BIN when set, in the
 * environment or .env (and then it must be executable), else `gotrue` on the
 * PATH, else undefined.
 */
export function findAuthBinary(env: NodeJS.ProcessEnv = stackEnvironment()): string | undefined {
  const given = env[AUTH_BIN_VARIABLE]?.trim();
  if (given) {
    if (!isExecutable(given)) throw new AuthBinaryError(`${AUTH_BIN_VARIABLE}=${given} is not an executable file`);
    return path.resolve(given);
  }
  for (const dir of (env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    const candidate = path.join(dir, 'gotrue');
    if (isExecutable(candidate)) return path.resolve(candidate);
  }
  return undefined;
}

/** An API key as Supabase issues them: a long-lived HS256 JWT naming a database role. */
export function signApiKey(jwtSecret: string, role: 'anon' | 'service_role'): Promise<string> {
  return new SignJWT({ role })
    .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
    .setIssuer('supabase-local')
    .setIssuedAt()
    .setExpirationTime('10y')
    .sign(new TextEncoder().encode(jwtSecret));
}

export interface AuthServerOptions {
  binary: string;
  /** The stack's database, as any role; the auth server connects as supabase_auth_admin. */
  databaseUrl: string;
  jwtSecret: string;
  settings: AuthSettings;
  smtp: { host: string; port: number };
  /** Port of the gateway (54321 in dev, as `supabase start`); 0 picks a free one. */
  gatewayPort?: number;
  /** The test OIDC issuer's port and client secret (fixed in dev; random when absent). */
  oidc?: { port?: number; clientSecret?: string };
  /** Apply the auth server's migrations first (skip when another instance already did). */
  migrate?: boolean;
  log?: (line: string) => void;
}

export interface AuthServer {
  /** The SUPABASE_URL: the gateway; the auth server is at `${url}/auth/v1`. */
  url: string;
  anonKey: string;
  serviceRoleKey: string;
  jwtSecret: string;
  oidc: OidcIssuer & { redirectUri: string };
  /** Stops the auth server process alone (the gateway then answers 502), as an outage. */
  stopServer(): Promise<void>;
  /** Starts it again after stopServer(). */
  startServer(): Promise<void>;
  stop(): Promise<void>;
}

function authDatabaseUrl(databaseUrl: string): string {
  const url = new URL(databaseUrl);
  url.username = 'supabase_auth_admin';
  url.password = '';
  url.searchParams.set('sslmode', 'disable');
  return url.toString();
}

function run(binary: string, args: string[], env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    mkdirSync(AUTH_WORKDIR, { recursive: true });
    const child = spawn(binary, args, { env, cwd: AUTH_WORKDIR, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(output) : reject(new AuthBinaryError(`${path.basename(binary)} ${args.join(' ')} exited ${code}:\n${output.trim().split('\n').slice(-15).join('\n')}`))));
  });
}

async function waitForHealth(url: string, child: ChildProcess, output: () => string, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new AuthBinaryError(`Supabase Auth exited ${child.exitCode} on start:\n${output().trim().split('\n').slice(-15).join('\n')}`);
    const healthy = await fetch(`${url}/health`, { signal: AbortSignal.timeout(1000) }).then(
      (response) => response.ok,
      () => false,
    );
    if (healthy) return;
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  throw new AuthBinaryError(`Supabase Auth did not answer ${url}/health within ${timeoutMs / 1000} s:\n${output().slice(-2000)}`);
}

function stopChild(child: ChildProcess | undefined): Promise<void> {
  if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
    child.once('exit', () => {
      clearTimeout(killer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

export async function startAuthServer(options: AuthServerOptions): Promise<AuthServer> {
  const log = options.log ?? (() => {});
  const { settings } = options;
  const [anonKey, serviceRoleKey] = await Promise.all([signApiKey(options.jwtSecret, 'anon'), signApiKey(options.jwtSecret, 'service_role')]);

  let upstream = '';
  const gateway: Gateway = await startGateway({
    port: options.gatewayPort,
    authUpstream: () => upstream,
    apiKeys: [anonKey, serviceRoleKey],
    templates: settings.recoveryTemplate ? { 'recovery.html': settings.recoveryTemplate.contentPath } : {},
  });
  const externalUrl = `${gateway.url}${AUTH_PATH}`;
  const redirectUri = `${externalUrl}/callback`;
  const oidc = await startOidcIssuer({ redirectUri, ...options.oidc });

  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    API_EXTERNAL_URL: externalUrl,
    GOTRUE_API_HOST: '127.0.0.1',
    GOTRUE_DB_DRIVER: 'postgres',
    GOTRUE_DB_DATABASE_URL: authDatabaseUrl(options.databaseUrl),
    GOTRUE_SITE_URL: settings.siteUrl,
    GOTRUE_URI_ALLOW_LIST: settings.redirectUrls.join(','),
    GOTRUE_DISABLE_SIGNUP: String(!settings.signupEnabled),
    GOTRUE_JWT_SECRET: options.jwtSecret,
    GOTRUE_JWT_EXP: String(settings.jwtExpiry),
    GOTRUE_JWT_AUD: 'authenticated',
    GOTRUE_JWT_ISSUER: externalUrl,
    GOTRUE_JWT_DEFAULT_GROUP_NAME: 'authenticated',
    GOTRUE_JWT_ADMIN_ROLES: 'service_role',
    GOTRUE_EXTERNAL_EMAIL_ENABLED: 'true',
    GOTRUE_MAILER_AUTOCONFIRM: String(!settings.emailConfirmations),
    GOTRUE_MAILER_SECURE_EMAIL_CHANGE_ENABLED: String(settings.secureEmailChange),
    // The links in the auth server's own e-mails (confirmation, invitation, e-mail
    // change) resolve these against API_EXTERNAL_URL; its default, `/verify`,
    // drops the `/auth/v1` of the gateway, which then answers 404. The Supabase
    // CLI sets the same. The reset e-mail's link is the project's template's, to the front end.
    GOTRUE_MAILER_URLPATHS_CONFIRMATION: `${AUTH_PATH}/verify`,
    GOTRUE_MAILER_URLPATHS_INVITE: `${AUTH_PATH}/verify`,
    GOTRUE_MAILER_URLPATHS_EMAIL_CHANGE: `${AUTH_PATH}/verify`,
    GOTRUE_MAILER_URLPATHS_RECOVERY: `${AUTH_PATH}/verify`,
    GOTRUE_SMTP_HOST: options.smtp.host,
    GOTRUE_SMTP_PORT: String(options.smtp.port),
    GOTRUE_SMTP_ADMIN_EMAIL: 'auth@portfolio.local',
    GOTRUE_SMTP_SENDER_NAME: 'Portfolio',
    GOTRUE_PASSWORD_MIN_LENGTH: String(settings.minimumPasswordLength),
    GOTRUE_SECURITY_REFRESH_TOKEN_ROTATION_ENABLED: String(settings.refreshTokenRotation),
    GOTRUE_SECURITY_REFRESH_TOKEN_REUSE_INTERVAL: String(settings.refreshTokenReuseInterval),
    GOTRUE_SECURITY_MANUAL_LINKING_ENABLED: String(settings.manualLinking),
    // Per-IP limits count the address our API forwards, not the API itself.
    GOTRUE_RATE_LIMIT_HEADER: 'X-Forwarded-For',
    GOTRUE_RATE_LIMIT_EMAIL_SENT: String(settings.rateLimits.emailSent),
    GOTRUE_RATE_LIMIT_OTP: String(settings.rateLimits.signInSignUps),
    GOTRUE_RATE_LIMIT_VERIFY: String(settings.rateLimits.tokenVerifications),
    GOTRUE_RATE_LIMIT_TOKEN_REFRESH: String(settings.rateLimits.tokenRefresh),
    GOTRUE_EXTERNAL_KEYCLOAK_ENABLED: 'true',
    GOTRUE_EXTERNAL_KEYCLOAK_CLIENT_ID: oidc.clientId,
    GOTRUE_EXTERNAL_KEYCLOAK_SECRET: oidc.clientSecret,
    GOTRUE_EXTERNAL_KEYCLOAK_URL: oidc.issuer,
    GOTRUE_EXTERNAL_KEYCLOAK_REDIRECT_URI: redirectUri,
    GOTRUE_LOG_LEVEL: 'warn',
  };
  if (settings.sessionInactivityTimeout) env.GOTRUE_SESSIONS_INACTIVITY_TIMEOUT = settings.sessionInactivityTimeout;
  if (settings.emailOtpExpiry) env.GOTRUE_MAILER_OTP_EXP = String(settings.emailOtpExpiry);
  if (settings.emailOtpLength) env.GOTRUE_MAILER_OTP_LENGTH = String(settings.emailOtpLength);
  if (settings.recoveryTemplate) {
    env.GOTRUE_MAILER_TEMPLATES_RECOVERY = `${gateway.url}/templates/recovery.html`;
    if (settings.recoveryTemplate.subject) env.GOTRUE_MAILER_SUBJECTS_RECOVERY = settings.recoveryTemplate.subject;
  }

  if (options.migrate ?? true) {
    await run(options.binary, ['migrate'], env);
    log('Supabase Auth migrations applied');
  }

  let child: ChildProcess | undefined;
  let output = '';
  const startServer = async () => {
    const port = await freePort();
    upstream = `http://127.0.0.1:${port}`;
    output = '';
    mkdirSync(AUTH_WORKDIR, { recursive: true });
    child = spawn(options.binary, ['serve'], { env: { ...env, PORT: String(port) }, cwd: AUTH_WORKDIR, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout?.on('data', (chunk) => (output = (output + chunk).slice(-20_000)));
    child.stderr?.on('data', (chunk) => (output = (output + chunk).slice(-20_000)));
    await waitForHealth(upstream, child, () => output);
  };

  try {
    await startServer();
  } catch (error) {
    await stopChild(child);
    await Promise.all([gateway.stop(), oidc.stop()]);
    throw error;
  }
  log(`Supabase Auth (${path.basename(options.binary)}) at ${externalUrl}`);

  return {
    url: gateway.url,
    anonKey,
    serviceRoleKey,
    jwtSecret: options.jwtSecret,
    oidc: { ...oidc, redirectUri },
    stopServer: () => stopChild(child),
    startServer,
    async stop() {
      await stopChild(child);
      await Promise.all([gateway.stop(), oidc.stop()]);
    },
  };
}
