import { AppError, withCause } from '../../lib/errors.ts';
import { authRateLimit, authServerFailure } from '../../plugins/supabase.ts';

// The auth server's failures, as the errors the SPEC asks for.

export type AuthFailure = { code?: string; status?: number; message?: string };

/**
 * Turns an auth server failure into our error: 503 when it is down, 500 when
 * it failed the request itself (`fallback` if that is a 500, else the SPEC's
 * `Internal server error`), else `fallback` or the error for its code.
 */
export function fail(error: unknown, fallback: AppError, byCode: Record<string, AppError> = {}): never {
  const failed = authServerFailure(error);
  // A 500 of the route's own (sign up's `Failed to register user`) says it in the SPEC's words.
  // A 500 of ours keeps the auth server's answer as its cause, which its log line writes.
  const withAnswer = () => (fallback.statusCode >= 500 ? withCause(fallback, error) : fallback);
  if (failed) throw failed.statusCode === 500 && fallback.statusCode === 500 ? withAnswer() : failed;
  const { code } = (error ?? {}) as AuthFailure;
  if (code && byCode[code]) throw byCode[code];
  throw authRateLimit(error) ?? withAnswer();
}
