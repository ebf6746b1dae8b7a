import { DEFAULT_EMAIL_FROM, type Settings } from './config.ts';
import { driverTarget } from './lib/database-url.ts';

// What production refuses to start without. A missing secret must never
// switch a protection off silently: the operator either gives a strong
// secret or turns the feature off by name (CAPTCHA_PROVIDER=off,
// LEGACY_ADMIN_TOKEN=off). Development and tests keep their conveniences.

const MIN_SECRET_BYTES = 32;

const weak = (secret: string) => Buffer.byteLength(secret, 'utf8') < MIN_SECRET_BYTES;

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);
const isLoopback = (hostname: string) => LOOPBACK_HOSTS.has(hostname) || hostname.endsWith('.localhost') || /^127\./.test(hostname);
// Also run on a setting as written when another is bad (config.ts): a URL that does not parse is named there.
const sendsToRemoteSmtp = (smtpUrl: string | undefined) => {
  const hostname = smtpUrl === undefined ? undefined : URL.parse(smtpUrl)?.hostname;
  return hostname !== undefined && !isLoopback(hostname);
};

export interface ProductionProblem {
  setting: string;
  /** Names the variable, for parseConfig's single line. */
  phrase: string;
}

/**
 * What production refuses in these settings, in a fixed order. Also run when
 * other settings are bad (config.ts): only what is off by name counts as off.
 */
export function productionProblems(config: Settings): ProductionProblem[] {
  if (config.NODE_ENV !== 'production') return [];
  const problems: ProductionProblem[] = [];
  if (config.CAPTCHA_PROVIDER !== 'off' && !config.CAPTCHA_SECRET) {
    problems.push({ setting: 'CAPTCHA_SECRET', phrase: 'CAPTCHA_SECRET is missing (required in production; CAPTCHA_PROVIDER=off runs without the bot check)' });
  }
  if (config.LEGACY_ADMIN_TOKEN !== 'off' && !config.ADMIN_JWT_SECRET) {
    problems.push({ setting: 'ADMIN_JWT_SECRET', phrase: 'ADMIN_JWT_SECRET is missing (required in production; LEGACY_ADMIN_TOKEN=off refuses legacy admin tokens)' });
  }
  if (!config.ANALYTICS_SALT_SECRET) {
    problems.push({ setting: 'ANALYTICS_SALT_SECRET', phrase: 'ANALYTICS_SALT_SECRET is missing (required in production: visitor ids must not change on restart)' });
  }
  if (config.SUPABASE_JWT_SECRET ? weak(config.SUPABASE_JWT_SECRET) : !config.SUPABASE_URL) {
    problems.push({
      setting: 'SUPABASE_JWT_SECRET',
      phrase: config.SUPABASE_JWT_SECRET
        ? `SUPABASE_JWT_SECRET is invalid (at least ${MIN_SECRET_BYTES} bytes in production)`
        : 'SUPABASE_JWT_SECRET is missing (required in production unless SUPABASE_URL publishes the signing keys)',
    });
  }
  // The development default sender: Resend refuses it (no one can verify localhost) and a remote
  // relay's recipients would drop it, so every notification would fail, quietly, in the outbox. An
  // SMTP server on this machine (the local stack's sink, a relay that rewrites senders) may take it.
  if ((config.RESEND_API_KEY || sendsToRemoteSmtp(config.SMTP_URL)) && /@localhost>?$/i.test(config.EMAIL_FROM.trim())) {
    problems.push({
      setting: 'EMAIL_FROM',
      phrase:
        config.EMAIL_FROM === DEFAULT_EMAIL_FROM
          ? 'EMAIL_FROM is missing (required in production when e-mail is sent: an address on a domain the provider accepts, not no-reply@localhost)'
          : 'EMAIL_FROM is invalid (in production, an address on a domain the provider accepts, not localhost)',
    });
  }
  // The admin pages hold a session: a notification's link over plain http hands it to anyone on the
  // way. Loopback stays allowed (a production build tried on one machine; productionWarnings names it).
  const admin = config.ADMIN_URL === undefined ? undefined : URL.parse(config.ADMIN_URL);
  if (admin?.protocol === 'http:' && !isLoopback(admin.hostname)) {
    problems.push({ setting: 'ADMIN_URL', phrase: 'ADMIN_URL is invalid (in production, an https:// address: notification e-mails link to the admin pages there)' });
  }
  return problems;
}

/**
 * What production starts with but warns of (server.ts logs each line): values
 * that are right on a developer's machine and quietly wrong on a server, yet
 * not refused, since a production build tried on one machine has them too.
 */
export function productionWarnings(config: Settings): string[] {
  if (config.NODE_ENV !== 'production') return [];
  const warnings: string[] = [];
  // The development defaults, kept from a copy of .env.example.
  const onThisMachine = (value: string | undefined) => value !== undefined && isLoopback(new URL(value).hostname);
  if (onThisMachine(config.CORS_ORIGIN)) {
    warnings.push(`CORS_ORIGIN is ${config.CORS_ORIGIN}, on this machine: browsers on the front end's public address are refused; set it to that address`);
  }
  // Where the e-mails link: reset to FRONTEND_URL (else CORS_ORIGIN), notifications to ADMIN_URL (else below it).
  const frontEnd = config.FRONTEND_URL ?? config.CORS_ORIGIN;
  if (onThisMachine(frontEnd)) {
    const which = config.ADMIN_URL === undefined ? 'reset and notification e-mails link' : 'reset e-mails link';
    warnings.push(`${which} to ${frontEnd} (${config.FRONTEND_URL === undefined ? 'CORS_ORIGIN' : 'FRONTEND_URL'}), on this machine: set FRONTEND_URL to the front end's public address`);
  }
  if (onThisMachine(config.ADMIN_URL)) {
    warnings.push(`ADMIN_URL is ${config.ADMIN_URL}, on this machine: notification e-mails link there; set it to the admin pages' public address`);
  }
  // postgres.js speaks plain text unless the URL asks for TLS (libpq would try TLS first): a hosted
  // database's connection string, as copied, sent the password and every row unencrypted wherever
  // its server does not insist on TLS. A Unix socket (a directory as the host) needs none.
  const target = driverTarget(config.DATABASE_URL);
  const parsed = URL.parse(target.url);
  const host = target.host ?? parsed?.hostname;
  const query = parsed?.searchParams;
  const asksForTls = query !== undefined && (query.has('ssl') || query.has('sslmode') || query.get('sslrootcert') === 'system');
  if (host && !host.startsWith('/') && !isLoopback(host) && !asksForTls) {
    warnings.push(`DATABASE_URL connects to ${host} without asking for TLS: add ?sslmode=require (or verify-full with the server's CA) to the URL`);
  }
  // Site keys are public: without the hosts, a token solved on any page that embeds ours passes.
  if (config.CAPTCHA_PROVIDER !== 'off' && config.CAPTCHA_SECRET && config.CAPTCHA_HOSTNAMES.length === 0) {
    warnings.push('CAPTCHA_HOSTNAMES is empty: a captcha token solved on any page that embeds the (public) site key passes the bot check; list the hosts the widget is served on');
  }
  return warnings;
}
