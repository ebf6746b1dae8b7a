import { randomFillSync } from 'node:crypto';
import { v7 } from 'uuid';

// The uuid package draws its 16 random bytes through WebCrypto's
// getRandomValues on every call, which cost 9.6 µs an event under load
// (bench:profile), more than the rest of enrichment. The same CSPRNG filled
// 4 KiB at a time, as Node's own randomUUID does, costs a fraction of that.
const POOL = Buffer.allocUnsafe(16 * 256);
let offset = POOL.length;

function random16(): Uint8Array {
  if (offset === POOL.length) {
    randomFillSync(POOL);
    offset = 0;
  }
  offset += 16;
  return POOL.subarray(offset - 16, offset);
}

/**
 * A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness. Event
 * ids are time-ordered, so the primary-key index grows at its right edge
 * instead of splitting pages at random. Postgres 15 has no uuidv7().
 */
export const uuidv7 = (now = Date.now()): string => v7({ msecs: now, random: random16() });
