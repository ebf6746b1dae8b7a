import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../config.ts';

// Server-side check of a captcha answer with the provider's siteverify
// protocol, which Cloudflare Turnstile and hCaptcha share: a form-encoded
// POST of secret, response and remoteip, answered by JSON `{success, ...}`.
// Without a secret there is nothing to check (docs/feedback.md).
//
// A site key is public, so `success: true` alone says only that someone
// solved our widget somewhere: on a page of their own that embeds our site
// key too. With CAPTCHA_HOSTNAMES (and CAPTCHA_ACTION) set, a passed token
// also has to name one of our hosts (and our action), as both providers'
// docs ask of the server.

export const SITEVERIFY_URLS = {
  turnstile: 'https://challenges.cloudflare.com/turnstile/v0/siteverify',
  hcaptcha: 'https://api.hcaptcha.com/siteverify',
} as const;

const VERIFY_TIMEOUT_MS = 5_000;

/**
 * `error-codes` of a siteverify answer that are about our request or the
 * provider, not the submitter's token (Turnstile's and hCaptcha's lists): a
 * wrong or missing secret, a secret of another site key, a malformed request,
 * the provider's own failure. Both providers answer them with HTTP 200 and
 * `success: false`; read as a refused token, a rotated secret turned every
 * submitter away as a bot, with a 400 no retry could pass.
 */
const NOT_THE_SUBMITTERS_FAULT = new Set([
  'missing-input-secret',
  'invalid-input-secret',
  'sitekey-secret-mismatch',
  'bad-request',
  'internal-error',
  'missing-remoteip',
  'invalid-remoteip',
  'not-using-dummy-passcode',
]);

export type CaptchaVerdict = 'passed' | 'failed' | 'unavailable';

/** A siteverify answer as read: every field may be missing or of any type. */
interface SiteverifyAnswer {
  success?: unknown;
  'error-codes'?: unknown;
  hostname?: unknown;
  action?: unknown;
}

/**
 * A field of the answer as a log line repeats it: a non-empty string, cut at
 * the longest hostname DNS allows (the provider's answer is not ours to
 * trust with the log's size), else null.
 */
const asLogged = (value: unknown): string | null => (typeof value === 'string' && value !== '' ? value.slice(0, 253) : null);

export interface CaptchaVerifier {
  readonly enabled: boolean;
  /** `log` hears why an answer is `unavailable`, or why a passed token was not ours; the client is told only the verdict. */
  verify(token: string | undefined, remoteIp: string, log?: Pick<FastifyBaseLogger, 'warn'>): Promise<CaptchaVerdict>;
}

export function createCaptchaVerifier(config: Config): CaptchaVerifier {
  const secret = config.CAPTCHA_SECRET;
  const provider = config.CAPTCHA_PROVIDER;
  // Production refuses to start without a secret unless the provider is `off` (config-production.ts).
  if (!secret || provider === 'off') return { enabled: false, verify: async () => 'passed' };
  const url = config.CAPTCHA_VERIFY_URL ?? SITEVERIFY_URLS[provider];
  // Lower-cased by the config: hostnames have no case.
  const hostnames = new Set(config.CAPTCHA_HOSTNAMES);
  const action = config.CAPTCHA_ACTION;

  /**
   * Where and for what a passed token was solved. A missing hostname is a
   * failure when hostnames are listed (hCaptcha can leave it out, by the
   * site's settings there): a token that cannot show its page is no better
   * than one from the wrong page. Logged, so the operator sees why.
   */
  function solvedHere(answer: SiteverifyAnswer, log: Pick<FastifyBaseLogger, 'warn'> | undefined): CaptchaVerdict {
    // What the provider saw is logged, never the token; not as `hostname`, which the log's every line gives to this machine's name.
    const refuse = (reason: string, seen: Record<string, string | null> = {}): CaptchaVerdict => {
      log?.warn({ provider, reason, captchaHostname: asLogged(answer.hostname), ...seen }, 'bot verification failed');
      return 'failed';
    };
    if (hostnames.size > 0) {
      const { hostname } = answer;
      if (typeof hostname !== 'string' || hostname === '') return refuse('siteverify named no hostname');
      if (!hostnames.has(hostname.toLowerCase())) return refuse('hostname not in CAPTCHA_HOSTNAMES');
    }
    // Turnstile protects the action from change by the page; compared exactly, as the widget was given it.
    if (action !== undefined && answer.action !== action) return refuse('action is not CAPTCHA_ACTION', { captchaAction: asLogged(answer.action) });
    return 'passed';
  }

  return {
    enabled: true,
    async verify(token, remoteIp, log) {
      if (!token) return 'failed';
      const unavailable = (reason: string): CaptchaVerdict => {
        log?.warn({ provider, reason }, 'bot verification unavailable');
        return 'unavailable';
      };
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          body: new URLSearchParams({ secret, response: token, remoteip: remoteIp }),
          signal: AbortSignal.timeout(VERIFY_TIMEOUT_MS),
        });
      } catch (error) {
        return unavailable(`siteverify unreachable: ${(error as Error).message}`);
      }
      if (!response.ok) return unavailable(`siteverify answered HTTP ${response.status}`);
      const answer = (await response.json().catch(() => undefined)) as SiteverifyAnswer | null | undefined;
      // `null` and other non-objects too: reading `success` off them would be a 500.
      if (typeof answer !== 'object' || answer === null) return unavailable('siteverify answered no JSON object');
      if (answer.success === true) return solvedHere(answer, log);
      const codes = Array.isArray(answer['error-codes']) ? answer['error-codes'].filter((code) => typeof code === 'string') : [];
      if (codes.some((code) => NOT_THE_SUBMITTERS_FAULT.has(code))) return unavailable(`siteverify refused our request: ${codes.join(', ')}`);
      return 'failed';
    },
  };
}
