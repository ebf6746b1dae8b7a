import { v7 } from 'uuid';

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness. Event
 * ids are time-ordered, so the primary-key index grows at its right edge
 * instead of splitting pages at random. Postgres 15 has no uuidv7().
 */
export const uuidv7 = (now = Date.now()): string => v7({ msecs: now });
