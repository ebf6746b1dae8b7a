import { isIP } from 'node:net';
import { z } from 'zod';

// The kinds of setting config.ts is made of: optional strings, positive
// integers, e-mail lists, the trusted proxies.

export const optionalString = z
  .string()
  .optional()
  .transform((value) => (value === undefined || value.trim() === '' ? undefined : value));

export const positiveInt = (fallback: number) => z.coerce.number().int().positive().default(fallback);

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
