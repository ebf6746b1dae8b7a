import type { Session as SupabaseSession, User as SupabaseUser } from '@supabase/supabase-js';
import { decodeJwt } from 'jose';
import type { Session } from './schemas.ts';

// supabase-js answers in the SPEC's shapes: sessions, timestamps, display names.

/**
 * The access token's lifetime, from its own claims. supabase-js derives
 * `expires_in` from `expires_at` and the clock, so a refresh that crosses a
 * second boundary reports 3599; the SPEC's figure is the lifetime (3600).
 */
function lifetimeSeconds(session: SupabaseSession): number {
  try {
    const { exp, iat } = decodeJwt(session.access_token);
    if (typeof exp === 'number' && typeof iat === 'number' && exp > iat) return exp - iat;
  } catch {
    // Not a JWT we can read: keep the client's figure.
  }
  return session.expires_in;
}

export function toSession(session: SupabaseSession): Session {
  return {
    accessToken: session.access_token,
    refreshToken: session.refresh_token,
    expiresIn: lifetimeSeconds(session),
    tokenType: session.token_type,
  };
}

/** The auth server writes microseconds or nanoseconds; the SPEC's timestamps have milliseconds. */
export function isoTimestamp(value: string | null | undefined): string | null {
  if (!value) return null;
  const time = new Date(value);
  return Number.isNaN(time.getTime()) ? null : time.toISOString();
}

export function displayName(user: SupabaseUser): string {
  const name = user.user_metadata?.name;
  return typeof name === 'string' && name.trim() ? name.trim() : (user.email ?? '').split('@')[0];
}
