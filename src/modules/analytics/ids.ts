import { randomUUID } from 'node:crypto';

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness. Event
 * ids are time-ordered, so the primary-key index grows at its right edge
 * instead of splitting pages at random. Postgres 15 has no uuidv7().
 */
export function uuidv7(now = Date.now()): string {
  const time = now.toString(16).padStart(12, '0');
  // randomUUID(): xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx; keep its random tail and variant bits.
  return `${time.slice(0, 8)}-${time.slice(8, 12)}-7${randomUUID().slice(15)}`;
}
