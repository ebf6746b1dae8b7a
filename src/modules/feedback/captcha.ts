import type { FastifyBaseLogger } from 'fastify';
import type { Config } from '../../config.ts';

// Server-side check of a captcha answer with the provider's siteverify
// protocol, which Cloudflare Turnstile and hCaptcha share: a form-encoded
// POST of secret, response and remoteip, answered by JSON `{success, ...}`.
// Without a secret there is nothing to check (docs/feedback.md).

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

export interface CaptchaVerifier {
  readonly enabled: boolean;
  /** `log` hears why an answer is `unavailable`; the client is told only that. */
  verify(token: string | undefined, remoteIp: string, log?: Pick<FastifyBaseLogger, 'warn'>): Promise<CaptchaVerdict>;
}

export function createCaptchaVerifier(config: Config): CaptchaVerifier {
  const secret = config.CAPTCHA_SECRET;
  const provider = config.CAPTCHA_PROVIDER;
  // Production refuses to start without a secret unless the provider is `off` (config-production.ts).
  if (!secret || provider === 'off') return { enabled: false, verify: async () => 'passed' };
  const url = config.CAPTCHA_VERIFY_URL ?? SITEVERIFY_URLS[provider];

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
      const answer = (await response.json().catch(() => undefined)) as { success?: unknown; 'error-codes'?: unknown } | null | undefined;
      // `null` and other non-objects too: reading `success` off them would be a 500.
      if (typeof answer !== 'object' || answer === null) return unavailable('siteverify answered no JSON object');
      if (answer.success === true) return 'passed';
      const codes = Array.isArray(answer['error-codes']) ? answer['error-codes'].filter((code) => typeof code === 'string') : [];
      if (codes.some((code) => NOT_THE_SUBMITTERS_FAULT.has(code))) return unavailable(`siteverify refused our request: ${codes.join(', ')}`);
      return 'failed';
    },
  };
}
