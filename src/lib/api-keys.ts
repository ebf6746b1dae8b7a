import { hash, randomBytes } from 'node:crypto';

// A website's API key: 256 random bits behind a recognisable prefix. Only its
// SHA-256 hash is stored (a fast hash is right here: the key is random, not a
// password), plus the first characters to tell keys apart in lists.

export const API_KEY_PREFIX = 'wsk_';
const API_KEY_PATTERN = /^wsk_[A-Za-z0-9_-]{43}$/;
const DISPLAY_PREFIX_LENGTH = 12;

export interface NewApiKey {
  key: string;
  hash: Buffer;
  prefix: string;
}

export function hashApiKey(key: string): Buffer {
  return hash('sha256', key, 'buffer');
}

export function generateApiKey(): NewApiKey {
  const key = API_KEY_PREFIX + randomBytes(32).toString('base64url');
  return { key, hash: hashApiKey(key), prefix: key.slice(0, DISPLAY_PREFIX_LENGTH) };
}

/** Could `value` be one of our keys? Saves a lookup for anything else. */
export function isWellFormedApiKey(value: string): boolean {
  return API_KEY_PATTERN.test(value);
}
