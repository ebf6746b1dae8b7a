// Application errors carry the HTTP status and the message the client sees.
// The error handler (plugins/errors.ts) turns them into SPEC section 7 bodies.

export type FieldErrors = Record<string, string[]>;

export class AppError extends Error {
  readonly statusCode: number;
  readonly details?: FieldErrors;
  /** Why, for the refusal's log line only; the client gets `message` (a 401 says no more than that). */
  reason?: string;

  constructor(statusCode: number, message: string, details?: FieldErrors) {
    super(message);
    this.statusCode = statusCode;
    this.details = details;
  }
}

export const badRequest = (message: string, details?: FieldErrors) => new AppError(400, message, details);
export const validationFailed = (details: FieldErrors) => new AppError(400, 'Validation failed', details);
export const unauthorized = (message = 'Authentication required') => new AppError(401, message);
/** `error`, with why it was refused for its log line: at most 200 characters, as it can quote what the client sent. */
export const withReason = <E extends AppError>(error: E, reason: string): E => Object.assign(error, { reason: reason.slice(0, 200) });
/** `error`, with the failure behind it as its cause: a 5xx's log line writes the cause's message and stack (pino), its answer never. */
export const withCause = <E extends AppError>(error: E, cause: unknown): E => Object.assign(error, { cause });
/** 401 `Authentication required`, and why the credentials failed for the log. */
export const credentialsRefused = (reason: string) => withReason(unauthorized(), reason);

/**
 * RFC 6750's WWW-Authenticate for a 401 of a bearer-token check. The body is
 * the SPEC's `Authentication required` whatever the cause; the header tells a
 * client an expired token (refresh, then retry) from one refused for good
 * (sign in again) without it decoding the JWT. No error code when no token
 * came (RFC 6750 section 3).
 */
export const BEARER_CHALLENGES = {
  missing: 'Bearer',
  expired: 'Bearer error="invalid_token", error_description="The access token expired"',
  invalid: 'Bearer error="invalid_token", error_description="The access token is invalid or its session has ended"',
} as const;

const challengeOf = new WeakMap<Error, string>();

/** The WWW-Authenticate challenge withBearerChallenge gave `error`, if any. */
export const bearerChallengeOf = (error: Error): string | undefined => challengeOf.get(error);

/** `error` (a 401), answered with the challenge of its kind as WWW-Authenticate (plugins/auth.ts sends it). */
export function withBearerChallenge<E extends AppError>(error: E, kind: keyof typeof BEARER_CHALLENGES): E {
  challengeOf.set(error, BEARER_CHALLENGES[kind]);
  return error;
}

export const forbidden = (message = 'Insufficient permissions') => new AppError(403, message);
export const notFound = (message = 'Resource not found') => new AppError(404, message);
export const conflict = (message: string) => new AppError(409, message);
/** Every body the API reads is JSON (ingestion takes it as text/plain too): the answer says what to send. */
export const UNSUPPORTED_CONTENT_TYPE = 'Unsupported content type; send JSON with Content-Type: application/json';
/** SPEC 7: any unexpected failure. */
export const internalError = () => new AppError(500, 'Internal server error');
export const serviceUnavailable = (message = 'Service temporarily unavailable') => new AppError(503, message);
/** Seconds a 503 asks its client to wait before trying again (RFC 9110 Retry-After). */
export const SERVICE_UNAVAILABLE_RETRY_AFTER_S = 5;

/**
 * 503 of a part the operator left unconfigured, a supported setup the start
 * warns of once (Supabase Auth without SUPABASE_URL, say). No failure, and any
 * client may ask for it as often as its budget allows: logged as a refusal
 * (warn, no stack, not stored), its `reason` naming the missing setting.
 */
export class NotConfiguredError extends AppError {
  constructor(message: string, reason: string) {
    super(503, message);
    this.reason = reason;
  }
}

/**
 * 503 for a request that arrives while the server closes: expected at every
 * deploy, so the error handler logs it as a refusal (warn, no stack), not as a
 * failure an alert should wake someone for.
 */
/**
 * 503 for a request turned away because the server is busy with others of
 * its kind for a moment (too many large submissions at once): a refusal the
 * client retries after Retry-After, not a failure of the server.
 */
export class BusyError extends AppError {
  constructor(message: string, reason: string) {
    super(503, message);
    this.reason = reason;
  }
}

export class ShuttingDownError extends AppError {
  constructor(message: string) {
    super(503, message);
  }
}

/** The `code` an error carries (a SQLSTATE, a driver's or a library's code), if any. */
export const errorCode = (error: unknown): unknown => (error as { code?: unknown } | null)?.code;

/** The Postgres error's constraint name, for the errors whose meaning depends on it. */
export function constraintOf(error: unknown): string | undefined {
  const name = (error as { constraint_name?: unknown } | null)?.constraint_name;
  return typeof name === 'string' ? name : undefined;
}

/**
 * Whether PostgreSQL ended the session with `error` (FATAL or PANIC) rather than
 * refused one statement (ERROR): a connection refused at its start (CONNECT
 * revoked, the login's role taken away) or cut. `severity` is the untranslated
 * one (PostgreSQL 9.6+); `severity_local` follows lc_messages.
 */
function endedTheSession(error: unknown): boolean {
  const { severity, severity_local: local } = error as { severity?: unknown; severity_local?: unknown };
  const level = severity ?? local;
  return level === 'FATAL' || level === 'PANIC';
}

/** Maps Postgres SQLSTATE codes (never message text) to client errors. */
export function fromPostgresError(error: unknown): AppError | undefined {
  const code = errorCode(error);
  if (typeof code !== 'string') return undefined;
  switch (code) {
    case '23505':
      return conflict('Resource already exists');
    case '23503':
      return badRequest('Referenced resource does not exist');
    case '23514':
    case '22P02':
    case '22001':
    case '22021': // a NUL or invalid byte in text
    case '22P05': // a NUL in jsonb
      return badRequest('Invalid value');
    case '42501':
      // A statement's (a table's privilege, row-level security) is the caller's; one that ends the
      // session is the database refusing the connection itself (CONNECT revoked, the login no longer
      // granted service_role): every request fails alike, an outage for the 5xx alerts, not a 403.
      return endedTheSession(error) ? serviceUnavailable('Database unavailable') : forbidden();
    case '57014': // statement_timeout (or a cancelled query): the database is busy, not broken
    case '55P03': // lock_not_available
    case '40P01': // deadlock_detected: one of two transactions is cancelled; a retry succeeds
    case '40001': // serialization_failure
    case 'ACQUIRE_TIMEOUT': // no pooled connection in time (plugins/db.ts)
    case '53300': // too_many_connections: the server's, a database's or a role's connection slots are all taken
      return serviceUnavailable('Database busy; try again shortly');
    case '57P01': // admin_shutdown: the connection was terminated
    case '57P02':
    case '57P03':
    case '08000':
    case '08003':
    case '08006':
    case 'CONNECTION_CLOSED':
    case 'CONNECTION_DESTROYED':
    case 'CONNECT_TIMEOUT':
    case 'CONNECTION_ENDED':
    case 'ECONNREFUSED':
    case 'ECONNRESET': // the server ended the connection (pg_terminate_backend, failover)
    case 'EPIPE': // the same, seen by a write after the server's end of the socket closed
    // A login refused while the app runs (plugins/db-login.ts ends the start on these): a role
    // dropped or barred from logging in, a password changed, the database dropped or renamed.
    case '28000':
    case '28P01':
    case '3D000':
      return serviceUnavailable('Database unavailable');
    default:
      // Any other session the server ended (a role setting refused at connection start, an idle
      // session timed out): the connection is gone, not the request at fault.
      return endedTheSession(error) ? serviceUnavailable('Database unavailable') : undefined;
  }
}

/** 429 with the seconds until the window resets (SPEC section 7). */
export class RateLimitError extends AppError {
  readonly retryAfter: number;

  constructor(retryAfter: number) {
    super(429, 'Too many requests. Please try again later.');
    this.retryAfter = retryAfter;
  }
}
