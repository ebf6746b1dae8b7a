import { BlockList, isIP } from 'node:net';
import { z } from 'zod';

// The kinds of setting config.ts is made of: optional strings, numbers,
// URLs, choices, secrets, e-mail lists, the trusted proxies. Each refuses a bad
// value with what it must be, in our words: parseConfig's line reads
// `PORT is invalid (must be a port from 0 to 65535)`, never zod's own text.

export const optionalString = z
  .string()
  .optional()
  .transform((value) => (value === undefined || value.trim() === '' ? undefined : value));

/** A whole number from min to max; `must` says so, for every way a value can fail (not a number, a fraction, out of range). */
function wholeNumber(min: number, max: number, must: string) {
  return z.coerce.number({ error: must }).int(must).min(min, must).max(max, must);
}

export const positiveInt = (fallback: number) => wholeNumber(1, Number.MAX_SAFE_INTEGER, 'must be a positive whole number').default(fallback);

/** The longest delay Node's timers (and PostgreSQL's timeouts) take: 2^31 − 1 ms, about 24.8 days. */
export const MAX_TIMER_MS = 2_147_483_647;

/**
 * A duration in milliseconds. Capped at MAX_TIMER_MS: Node fires a longer
 * timer after 1 ms, so a large value meant as "no limit" made the shutdown
 * exit at once and every database wait give up at once.
 */
export const milliseconds = (fallback: number) =>
  wholeNumber(1, MAX_TIMER_MS, `must be a whole number of milliseconds from 1 to ${MAX_TIMER_MS}`).default(fallback);

export const intBetween = (min: number, max: number, fallback: number) =>
  wholeNumber(min, max, `must be a whole number from ${min} to ${max}`).default(fallback);

/** Unset, empty, or a whole number from min to max: for a setting whose default depends on others (config.ts says which). */
export function optionalIntBetween(min: number, max: number) {
  const must = `must be a whole number from ${min} to ${max}`;
  return optionalString.pipe(z.string().transform(Number).pipe(z.number({ error: must }).int(must).min(min, must).max(max, must)).optional());
}

/** A TCP port; 0 lets the system pick a free one (the tests' servers). */
export const port = (fallback: number) => wholeNumber(0, 65535, 'must be a port from 0 to 65535').default(fallback);

/** One of `values`, named in the message. */
export const choice = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}` });

/** An http(s) URL, `example` showing the kind meant: what fetch, supabase-js and browsers take. */
export const url = (example: string) => z.url({ protocol: z.regexes.httpProtocol, error: `must be a URL such as ${example}` });

/**
 * The front end's URL, of which CORS takes the origin: one URL, not a list. A
 * list passed as some URL all the same (`https://a.example,https://b.example`
 * read as the host `a.example,https`), and every preflight was refused.
 */
export const origin = (example: string) =>
  z
    .string()
    .refine((value) => !value.includes(','), `must be one URL such as ${example}, not a list (CORS allows one origin)`)
    .pipe(url(example));

/** Unset, empty, or an http(s) URL. */
export const optionalUrl = (example: string) => optionalString.pipe(url(example).optional());

/**
 * Unset, empty, or a Supabase project's URL. Its clients add /auth/v1 (and
 * /rest/v1) themselves: the auth server's URL, as copied from its settings,
 * sent every sign-in to /auth/v1/auth/v1/token, and the start said nothing.
 * Another path is kept: a self-hosted stack may sit below one.
 */
export const optionalSupabaseUrl = (example: string) =>
  optionalString.pipe(
    url(example)
      .refine((value) => !/\/auth\/v1\/*$/i.test(URL.parse(value)?.pathname ?? ''), `must be the project URL such as ${example}, without /auth/v1: the client adds that itself`)
      .optional(),
  );

// The URLs a client library parses itself (postgres.js, ioredis, nodemailer)
// are checked here as that client reads them: a value it cannot read would
// make it throw while the app is built, with a stack trace that prints the URL,
// password and all. A refusal says what the value must be, never what it is.

/** What is wrong with a client's URL: its form (scheme, host, port, path), or a percent escape in its credentials. */
type UrlProblem = 'form' | 'escape';

/** Whether the URL's user name and password decode, as postgres.js and ioredis decode them (decodeURIComponent throws otherwise). */
function credentialsDecode(parsed: URL): boolean {
  try {
    decodeURIComponent(parsed.username);
    decodeURIComponent(parsed.password);
    return true;
  } catch {
    return false;
  }
}

/** The target_session_attrs postgres.js knows; it throws on any other. */
const POSTGRES_SESSION_ATTRS = new Set(['read-write', 'read-only', 'primary', 'standby', 'prefer-standby']);

/**
 * Why postgres.js (plugins/db.ts) cannot read `value`; undefined when it can.
 * Its parseUrl takes several comma-separated hosts (host1:5432,host2:5433),
 * each with its own port, and parses the URL with the first of them.
 */
function postgresUrlProblem(value: string): UrlProblem | undefined {
  if (!/^postgres(ql)?:\/\//i.test(value)) return 'form';
  const authority = value.slice(value.indexOf('://') + 3).split(/[?/]/)[0];
  let hosts: string;
  try {
    hosts = decodeURIComponent(authority.slice(authority.indexOf('@') + 1));
  } catch {
    return 'form';
  }
  const hostPorts = hosts.split(',').map((host) => host.split(':')[1]);
  if (hostPorts.some((hostPort) => hostPort && !(/^\d{1,5}$/.test(hostPort) && Number(hostPort) <= 65535))) return 'form';
  const parsed = URL.parse(value.replace(hosts, hosts.split(',')[0]));
  const sessionAttrs = parsed?.searchParams.get('target_session_attrs');
  if (!parsed || (sessionAttrs && !POSTGRES_SESSION_ATTRS.has(sessionAttrs))) return 'form';
  return credentialsDecode(parsed) ? undefined : 'escape';
}

/** Why ioredis (plugins/rate-limit.ts) cannot read `value` as a redis:// URL; undefined when it can. The path, if any, is the database number. */
function redisUrlProblem(value: string): UrlProblem | undefined {
  if (!/^rediss?:\/\//i.test(value)) return 'form';
  const parsed = URL.parse(value);
  if (!parsed || !/^\/?\d*$/.test(parsed.pathname)) return 'form';
  return credentialsDecode(parsed) ? undefined : 'escape';
}

/** Why `value` is no SMTP URL for nodemailer (the feedback outbox's transport): another scheme, no host, a bad escape; undefined when it is one. */
function smtpUrlProblem(value: string): UrlProblem | undefined {
  if (!/^smtps?:\/\//i.test(value)) return 'form';
  const parsed = URL.parse(value);
  if (!parsed?.hostname) return 'form';
  return credentialsDecode(parsed) ? undefined : 'escape';
}

/** A URL `problem` finds nothing wrong with; `must` is the refusal, with the escape rule when an escape is what failed. */
function clientUrl(must: string, problem: (value: string) => UrlProblem | undefined) {
  return z.string().superRefine((value, context) => {
    const found = problem(value);
    if (found === undefined) return;
    context.addIssue({ code: 'custom', message: found === 'escape' ? `${must}; a % in the user name or password must be written %25` : must });
  });
}

/** A PostgreSQL connection URL, as postgres.js reads it. */
export const postgresUrl = clientUrl('must be a URL such as postgres://user:password@host:5432/database', postgresUrlProblem);

/** Unset, empty, or a Redis URL (rediss:// for TLS), as ioredis reads it. */
export const optionalRedisUrl = optionalString.pipe(
  clientUrl('must be a URL such as redis://:password@host:6379, or rediss:// for TLS', redisUrlProblem).optional(),
);

/** Unset, empty, or an SMTP URL (smtps:// for TLS) with a host. */
export const optionalSmtpUrl = (example: string) => optionalString.pipe(clientUrl(`must be a URL such as ${example}`, smtpUrlProblem).optional());

/** Unset, empty, or a secret of at least `min` characters. */
export const optionalSecret = (min: number) => optionalString.pipe(z.string().min(min, `must be at least ${min} characters`).optional());

export const emailList = (value: string) =>
  value
    .split(',')
    .map((email) => email.trim())
    .filter((email) => email !== '');

// proxy-addr's names for ranges, as Fastify's trustProxy accepts them.
const NAMED_RANGES = new Set(['loopback', 'linklocal', 'uniquelocal']);

/** An IP address, a CIDR range (address/prefix) or a named range. */
function isProxyAddress(entry: string): boolean {
  if (NAMED_RANGES.has(entry)) return true;
  const [address, prefix, ...rest] = entry.split('/');
  const version = isIP(address);
  if (version === 0 || rest.length > 0) return false;
  if (prefix === undefined) return true;
  return /^\d{1,3}$/.test(prefix) && Number(prefix) <= (version === 4 ? 32 : 128);
}

/** The IPv4-mapped block (::ffff:a.b.c.d): an IPv6 range that overlaps it trusts IPv4 clients too. */
const IPV4_MAPPED = new BlockList();
IPV4_MAPPED.addSubnet('::ffff:0:0', 96, 'ipv6');

/**
 * A range wider than any proxy fleet: more than a /8 of IPv4 (10.0.0.0/8 is
 * the widest private one), more than a /7 of IPv6 (fc00::/7, unique local),
 * or more than a /8 of IPv4 written as IPv4-mapped IPv6. Trusting one makes
 * the left-most X-Forwarded-For entry, which the client writes, its address,
 * as `true` would (0.0.0.0/1,128.0.0.0/1 did); 0.0.0.0/0 made the app fail to
 * build with a stack trace instead of this line.
 */
function isTooBroad(entry: string): boolean {
  const [address, prefixText] = entry.split('/');
  if (prefixText === undefined || NAMED_RANGES.has(entry)) return false;
  const prefix = Number(prefixText);
  if (isIP(address) === 4) return prefix < 8;
  if (prefix < 7) return true;
  const range = new BlockList();
  range.addSubnet(address, prefix, 'ipv6');
  const overlapsMapped = range.check('::ffff:0:0', 'ipv6') || IPV4_MAPPED.check(address, 'ipv6');
  return overlapsMapped && prefix < 96 + 8;
}

/** The most proxies a hop count may name: more trusts entries a client writes itself, for any real chain. */
const MAX_PROXY_HOPS = 5;

/** TRUST_PROXY: false, a hop count, or the proxies' addresses / CIDR ranges; never `true`. */
export const trustProxySetting = z
  .string()
  .default('false')
  .transform((value, context) => {
    const trimmed = value.trim();
    if (trimmed === '' || trimmed === 'false' || trimmed === '0') return false as const;
    if (/^\d+$/.test(trimmed)) {
      if (Number(trimmed) <= MAX_PROXY_HOPS) return Number(trimmed);
      context.addIssue({ code: 'custom', message: `a hop count must be at most ${MAX_PROXY_HOPS}: a larger one trusts X-Forwarded-For entries the client writes` });
      return z.NEVER;
    }
    const entries = trimmed.split(',').map((entry) => entry.trim()).filter(Boolean);
    const bad = entries.filter((entry) => !isProxyAddress(entry));
    const broad = entries.filter((entry) => !bad.includes(entry) && isTooBroad(entry));
    if (trimmed === 'true' || bad.length > 0 || broad.length > 0 || entries.length === 0) {
      context.addIssue({
        code: 'custom',
        message:
          trimmed === 'true'
            ? 'true would trust every X-Forwarded-For entry; give the number of proxies (e.g. 1) or their addresses / CIDR ranges'
            : bad.length > 0 || entries.length === 0
              ? `not a hop count or proxy addresses: ${bad.join(', ')}`
              : `too broad for proxies (at most a /8 of IPv4, a /7 of IPv6): ${broad.join(', ')}`,
      });
      return z.NEVER;
    }
    return entries;
  });

/** One DNS name or IPv4 address: labels of letters, digits and inner hyphens, joined by dots. */
const HOSTNAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/i;

/**
 * Hostnames, comma-separated, as a captcha provider's siteverify answer names
 * the page a token was solved on: bare, no scheme, port or path, which that
 * answer never has (a URL written here would match no token, and every
 * submitter would be refused). Lower-cased, since hostnames have no case.
 * Unset or empty: an empty list.
 */
export const optionalHostnameList = optionalString
  .refine((value) => value === undefined || hostnameList(value).every((hostname) => HOSTNAME.test(hostname)), {
    message: 'must be hostnames, comma-separated, such as www.example.com (no scheme, port or path)',
  })
  .transform((value) => (value === undefined ? [] : hostnameList(value)));

function hostnameList(value: string): string[] {
  return value
    .split(',')
    .map((hostname) => hostname.trim().toLowerCase())
    .filter((hostname) => hostname !== '');
}

/** Unset, empty, or a Turnstile action: what its widget takes (up to 32 letters, digits, `_` and `-`). */
export const optionalTurnstileAction = optionalString.pipe(
  z
    .string()
    .regex(/^[\w-]{1,32}$/, 'must be up to 32 letters, digits, _ or - (the action the Turnstile widget is given)')
    .optional(),
);

/** The address of a sender as nodemailer and Resend take it, the form a browser's e-mail field accepts (a@localhost too). */
const SENDER_ADDRESS = z.regexes.html5Email;

/**
 * Unset, empty, or a sender: `address` or `Name <address>`. Anything else
 * started silently, and every notification then failed in the outbox, for
 * its twenty tries (about 13 hours).
 */
export const optionalEmailSender = optionalString.refine(
  (value) => {
    if (value === undefined) return true;
    const named = /^[^<>]*<([^<>]+)>$/.exec(value.trim());
    return SENDER_ADDRESS.test(named ? named[1].trim() : value.trim());
  },
  { message: 'must be an e-mail address, or a name and an address as Portfolio <no-reply@example.com>' },
);
