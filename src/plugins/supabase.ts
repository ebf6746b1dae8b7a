import { createClient, isAuthRetryableFetchError, type SupabaseClient } from '@supabase/supabase-js';
import type { FastifyInstance } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.ts';
import { withinDeadline as raceDeadline } from '../lib/deadline.ts';
import { type AppError, badRequest, internalError, NotConfiguredError, RateLimitError, serviceUnavailable, validationFailed, withCause } from '../lib/errors.ts';

// Clients of Supabase Auth through supabase-js. A request gets a client of
// its own that keeps no session between requests and forwards the caller's
// IP, so the auth server's per-IP limits count users, not this server.

export interface SupabaseAuth {
  configured: boolean;
  /** Longest wait for the auth server, in milliseconds. */
  timeoutMs: number;
  /**
   * A client acting for the caller at `ip`; with `accessToken`, it calls the
   * auth server as that signed-in user.
   */
  forRequest(ip: string, accessToken?: string): SupabaseClient;
  /** Whether admin() has a service-role key to call with. */
  readonly canAdminister: boolean;
  /** The service-role client for the admin API; never exposed to callers. */
  admin(): SupabaseClient;
}

declare module 'fastify' {
  interface FastifyInstance {
    supabase: SupabaseAuth;
  }
}

/**
 * The auth server could not be reached, did not answer in time, or a gateway
 * in front of it answered for it (502–504): it is unavailable (503). Its own
 * 500 is not that: it answered (isAuthServerError).
 */
export function isAuthServerDown(error: unknown): boolean {
  // supabase-js calls every 5xx retryable, its own 500 included.
  if (isAuthServerError(error)) return false;
  if (isAuthRetryableFetchError(error)) return true;
  const status = (error as { status?: unknown } | null)?.status;
  return typeof status === 'number' && status > 500;
}

const AUTH_UNAVAILABLE = 'Authentication service unavailable';
export const authUnavailable = () => serviceUnavailable(AUTH_UNAVAILABLE);

/** The settings among `settings` that are not set, as a phrase for a log line: `SUPABASE_ANON_KEY is not set`. */
function notSet(settings: Record<string, string | undefined>): string {
  const missing = Object.keys(settings).filter((name) => !settings[name]);
  return missing.length === 1 ? `${missing[0]} is not set` : `${missing.join(' and ')} are not set`;
}

/**
 * What a failure that is the auth server's, not the client's, means for the
 * client: 503 when it is down (isAuthServerDown), 500 when it failed the
 * request itself (isAuthServerError); undefined for its refusals of what the
 * client sent, which each route answers in its own words.
 */
export function authServerFailure(error: unknown): AppError | undefined {
  // The auth server's own error goes to the log as the cause of ours, so a failed connection and
  // its 500 can be told apart there; never to the client.
  if (isAuthServerDown(error)) return withCause(authUnavailable(), error);
  if (isAuthServerError(error)) return withCause(internalError(), error);
  return undefined;
}

/**
 * The auth server's own per-address limit (a 429, or an `over_…` code such as
 * `over_request_rate_limit`): our 429, so a client is not told its password
 * is wrong and does not try again at once. It waits a minute unless the auth
 * server said how long.
 */
export function authRateLimit(error: unknown): RateLimitError | undefined {
  const { code, status, message } = (error ?? {}) as { code?: string; status?: number; message?: string };
  if (status !== 429 && !code?.startsWith('over_')) return undefined;
  // A second e-mail to one address within its minute is refused with the
  // seconds left, rounded down ('…you can only request this after 41
  // seconds.'): the client waits that long and one second more. The other
  // budgets (hourly e-mails, requests per address) say no time. Read from the
  // text, which we otherwise never match: the answer has no field for it, and
  // a text that changes only brings back the minute.
  const secondsLeft = /after (\d+) seconds?/.exec(message ?? '')?.[1];
  return new RateLimitError(secondsLeft === undefined ? 60 : Math.min(Number(secondsLeft), 3599) + 1);
}

/**
 * The auth server answered 500 itself: it is up, and failed this request,
 * most often because its database refused the write. That is also how it
 * refuses the second of two requests for one address at once ('Database
 * error saving new user'); a timeout or a gateway's 502–504 is not, and the
 * request may have gone through. The client gets a 500 (SPEC 7: sign up's
 * `Failed to register user`, elsewhere `Internal server error`).
 */
export function isAuthServerError(error: unknown): boolean {
  return (error as { status?: unknown } | null)?.status === 500;
}

/**
 * The auth server's refusal of what the client sent (400 or 422), by its
 * error code, never its text: an invalid address is our validation error on
 * `email`, a password it finds too weak one on `password`; any other refusal
 * keeps the auth server's message (an address its settings do not allow, a
 * provider switched off), which says more than we could.
 */
export function authRefusal(error: unknown): AppError {
  const { code, message = 'Refused by the authentication service' } = (error ?? {}) as { code?: string; message?: string };
  switch (code) {
    case 'email_address_invalid':
    case 'validation_failed':
      // validation_failed names no field; the only field whose rule could differ from ours is the address (EmailSchema).
      return validationFailed({ email: ['Invalid email format'] });
    case 'weak_password':
      return validationFailed({ password: [message] });
    default:
      return badRequest(message);
  }
}

/**
 * A fetch that got no answer, said with its root cause. undici says only
 * `fetch failed` and keeps the reason in `cause` (ECONNREFUSED, ENOTFOUND, a
 * TLS error, a connect timeout), and supabase-js passes on the message alone,
 * so the outage's log line said nothing an operator could act on. Our own
 * deadline is said as such.
 */
function fetchFailure(error: unknown, timeoutMs: number): unknown {
  if (!(error instanceof Error)) return error;
  if (error.name === 'TimeoutError') return new Error(`no answer from the auth server within ${timeoutMs} ms`, { cause: error });
  const cause = error.cause as { code?: unknown; message?: unknown; errors?: unknown } | undefined;
  if (!cause) return error;
  // A connection tried at several addresses fails as an AggregateError, whose own message is empty.
  const nested = Array.isArray(cause.errors) ? cause.errors.map((each: { message?: unknown }) => String(each?.message)).join('; ') : '';
  const message = typeof cause.message === 'string' && cause.message ? cause.message : nested || String(cause);
  const code = typeof cause.code === 'string' && !message.includes(cause.code) ? `${cause.code} ` : '';
  return new Error(`${error.message}: ${code}${message}`, { cause: error });
}

/** How a call to the auth server ended, for /metrics: its answer's status class, or no answer. */
export type AuthServerOutcome = 'ok' | '4xx' | '5xx' | 'unreachable' | 'timeout';

/** Told of every call to the auth server, with its duration in seconds. */
export type AuthServerObserver = (outcome: AuthServerOutcome, seconds: number) => void;

function outcomeOf(status: number): AuthServerOutcome {
  if (status >= 500) return '5xx';
  return status >= 400 ? '4xx' : 'ok';
}

/**
 * fetch for auth calls, with a deadline on each call so a hung auth server
 * cannot hold a request; `observe` hears how each call ended (a call its
 * caller called off is no outcome of the auth server's, and is not told).
 */
export function deadlineFetch(timeoutMs: number, observe?: AuthServerObserver): typeof fetch {
  return async (input, init) => {
    const started = performance.now();
    const seconds = () => (performance.now() - started) / 1000;
    try {
      const response = await fetch(input, {
        ...init,
        signal: init?.signal ? AbortSignal.any([init.signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs),
      });
      observe?.(outcomeOf(response.status), seconds());
      return response;
    } catch (error) {
      if (!init?.signal?.aborted) observe?.((error as Error | null)?.name === 'TimeoutError' ? 'timeout' : 'unreachable', seconds());
      throw fetchFailure(error, timeoutMs);
    }
  };
}

/**
 * Settles with `work`, or with 503 once `timeoutMs` has passed. supabase-js
 * retries a refresh against an unreachable auth server for up to 30 s; our
 * caller should hear 503 at once and retry on its own schedule (SPEC 5.4).
 */
export function withinDeadline<T>(work: Promise<T>, timeoutMs: number): Promise<T> {
  // Said in the log line, so that a deadline of ours is not taken for the auth server's failure.
  return raceDeadline(work, timeoutMs, () => withCause(authUnavailable(), new Error(`no answer from the auth server within ${timeoutMs} ms`)));
}

export function createSupabaseAuth(config: Config, observe?: AuthServerObserver): SupabaseAuth {
  const { SUPABASE_URL: url, SUPABASE_ANON_KEY: anonKey, SUPABASE_SERVICE_ROLE_KEY: serviceKey } = config;
  const configured = Boolean(url && anonKey);
  // Not configured is the operator's choice, told once at the start: the same answer as the auth
  // server down (503), but logged as a refusal (plugins/errors.ts), since anyone can ask for it.
  const authNotConfigured = () => new NotConfiguredError(AUTH_UNAVAILABLE, `Supabase Auth is not configured: ${notSet({ SUPABASE_URL: url, SUPABASE_ANON_KEY: anonKey })}`);
  const adminNotConfigured = () => new NotConfiguredError(AUTH_UNAVAILABLE, notSet({ SUPABASE_URL: url, SUPABASE_SERVICE_ROLE_KEY: serviceKey }));
  const authFetch = deadlineFetch(config.AUTH_TIMEOUT_MS, observe);
  let adminClient: SupabaseClient | undefined;

  return {
    configured,
    canAdminister: Boolean(url && serviceKey),
    timeoutMs: config.AUTH_TIMEOUT_MS,
    forRequest(ip, accessToken) {
      if (!url || !anonKey) throw authNotConfigured();
      // The caller's token travels as a header, never as a stored session: a
      // stored session without a refresh token makes supabase-js try a refresh
      // in the background, whose rejection nobody awaits (it ended the process).
      const headers: Record<string, string> = { 'X-Forwarded-For': ip };
      if (accessToken) headers.Authorization = `Bearer ${accessToken}`;
      return createClient(url, anonKey, {
        auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
        global: { headers, fetch: authFetch },
      });
    },
    admin() {
      if (!url || !serviceKey) throw adminNotConfigured();
      adminClient ??= createClient(url, serviceKey, {
        auth: { persistSession: false, autoRefreshToken: false, detectSessionInUrl: false },
        global: { fetch: authFetch },
      });
      return adminClient;
    },
  };
}

export default fp<{ config: Config }>(
  async function supabasePlugin(app: FastifyInstance, { config }) {
    // Each call's outcome and duration go to /metrics (plugins/metrics.ts), where the app has them.
    const auth = createSupabaseAuth(config, app.hasDecorator('metrics') ? app.metrics.dependencies.authServerCall : undefined);
    // Allowed (an API without accounts still serves feedback and analytics), but never silent.
    if (!auth.configured) {
      const missing = notSet({ SUPABASE_URL: config.SUPABASE_URL, SUPABASE_ANON_KEY: config.SUPABASE_ANON_KEY });
      app.log.warn(`Supabase Auth is not configured (SUPABASE_URL, SUPABASE_ANON_KEY): ${missing}; sign up, sign in and the other /api/auth routes answer 503`);
    }
    // Sign-in works without it, so its absence would first show as an admin's unexplained 503.
    else if (!config.SUPABASE_SERVICE_ROLE_KEY) {
      app.log.warn(
        "SUPABASE_SERVICE_ROLE_KEY is not set: an admin creating a user or changing a user's e-mail (POST, PUT /api/users) is answered 503, and renames reach the profile only, not the auth server's user_metadata",
      );
    }
    app.decorate('supabase', auth);
  },
  { name: 'supabase' },
);
