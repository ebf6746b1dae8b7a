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

export type CaptchaVerdict = 'passed' | 'failed' | 'unavailable';

export interface CaptchaVerifier {
  readonly enabled: boolean;
  verify(token: string | undefined, remoteIp: string): Promise<CaptchaVerdict>;
}

export function createCaptchaVerifier(config: Config): CaptchaVerifier {
  const secret = config.CAPTCHA_SECRET;
  const provider = config.CAPTCHA_PROVIDER;
  // Production refuses to start without a secret unless the provider is `off` (config-production.ts).
  if (!secret || provider === 'off') return { enabled: false, verify: async () => 'passed' };
  const url = config.CAPTCHA_VERIFY_URL ?? SITEVERIFY_URLS[provider];

  return {
    enabled: true,
    async verify(token, remoteIp) {
      if (!token) return 'failed';
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          body: new URLSearchParams({ secret, response: token, remoteip: remoteIp }),
          signal: AbortSignal.timeout(VERIFY_TIMEOUT_MS),
        });
      } catch {
        return 'unavailable';
      }
      if (!response.ok) return 'unavailable';
      const answer = (await response.json().catch(() => undefined)) as { success?: unknown } | undefined;
      if (answer === undefined) return 'unavailable';
      return answer.success === true ? 'passed' : 'failed';
    },
  };
}
