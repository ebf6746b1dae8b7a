import { isIP } from 'node:net';
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

export const intBetween = (min: number, max: number, fallback: number) =>
  wholeNumber(min, max, `must be a whole number from ${min} to ${max}`).default(fallback);

/** A TCP port; 0 lets the system pick a free one (the tests' servers). */
export const port = (fallback: number) => wholeNumber(0, 65535, 'must be a port from 0 to 65535').default(fallback);

/** One of `values`, named in the message. */
export const choice = <const T extends readonly [string, ...string[]]>(values: T) =>
  z.enum(values, { error: `must be ${values.slice(0, -1).join(', ')} or ${values.at(-1)}` });

/** An absolute URL, `example` showing the kind meant. */
export const url = (example: string) => z.url({ error: `must be a URL such as ${example}` });

/** Unset, empty, or a URL. */
export const optionalUrl = (example: string) => optionalString.pipe(url(example).optional());

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

/** TRUST_PROXY: false, a hop count, or the proxies' addresses / CIDR ranges; never `true`. */
export const trustProxySetting = z
  .string()
  .default('false')
  .transform((value, context) => {
    const trimmed = value.trim();
    if (trimmed === '' || trimmed === 'false' || trimmed === '0') return false as const;
    if (/^\d+$/.test(trimmed)) return Number(trimmed);
    const entries = trimmed.split(',').map((entry) => entry.trim()).filter(Boolean);
    const bad = entries.filter((entry) => !isProxyAddress(entry));
    if (trimmed === 'true' || bad.length > 0 || entries.length === 0) {
      context.addIssue({
        code: 'custom',
        message:
          trimmed === 'true'
            ? 'true would trust every X-Forwarded-For entry; give the number of proxies (e.g. 1) or their addresses / CIDR ranges'
            : `not a hop count or proxy addresses: ${bad.join(', ')}`,
      });
      return z.NEVER;
    }
    return entries;
  });
