import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'smol-toml';
import { ROOT } from './database.ts';

// The [auth] settings of supabase/config.toml, which `supabase start` reads
// too: the local stack runs Supabase Auth with the same settings.

export interface AuthSettings {
  siteUrl: string;
  redirectUrls: string[];
  jwtExpiry: number;
  refreshTokenRotation: boolean;
  refreshTokenReuseInterval: number;
  /** `[auth.sessions] inactivity_timeout`, a Go duration ("720h"): a session not refreshed for this long ends. */
  sessionInactivityTimeout?: string;
  signupEnabled: boolean;
  manualLinking: boolean;
  minimumPasswordLength: number;
  emailConfirmations: boolean;
  /** `[auth.email] otp_expiry`: seconds a link or code from an e-mail works (the auth server's default, a day, when absent). */
  emailOtpExpiry?: number;
  /** `[auth.email] otp_length`: digits of the code in an e-mail, 6 to 10 (the auth server's default, 6, when absent); the reset token is a hash of it. */
  emailOtpLength?: number;
  secureEmailChange: boolean;
  recoveryTemplate?: { subject?: string; contentPath: string };
  rateLimits: { emailSent: number; signInSignUps: number; tokenVerifications: number; tokenRefresh: number };
}

type Table = Record<string, unknown>;
const table = (value: unknown): Table => (value && typeof value === 'object' ? (value as Table) : {});
const number = (value: unknown, fallback: number) => (typeof value === 'number' ? value : fallback);
const bool = (value: unknown, fallback: boolean) => (typeof value === 'boolean' ? value : fallback);

/**
 * `[auth.email] otp_length`, checked: the auth server quietly takes 6 for a
 * length outside 6 to 10, and a typo would shrink every reset token's space
 * back to 10^6 unseen, so the stack refuses to start instead.
 */
function otpLength(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (typeof value === 'number' && Number.isInteger(value) && value >= 6 && value <= 10) return value;
  throw new Error(`supabase/config.toml: [auth.email] otp_length must be a whole number from 6 to 10, not ${JSON.stringify(value)}`);
}

export async function readAuthSettings(file = path.join(ROOT, 'supabase/config.toml')): Promise<AuthSettings> {
  const auth = table(parse(await readFile(file, 'utf8')).auth);
  const email = table(auth.email);
  const recovery = table(table(email.template).recovery);
  const limits = table(auth.rate_limit);
  const sessions = table(auth.sessions);
  return {
    siteUrl: String(auth.site_url ?? 'http://localhost:5173'),
    redirectUrls: Array.isArray(auth.additional_redirect_urls) ? auth.additional_redirect_urls.map(String) : [],
    jwtExpiry: number(auth.jwt_expiry, 3600),
    refreshTokenRotation: bool(auth.enable_refresh_token_rotation, true),
    refreshTokenReuseInterval: number(auth.refresh_token_reuse_interval, 10),
    sessionInactivityTimeout: typeof sessions.inactivity_timeout === 'string' && sessions.inactivity_timeout ? sessions.inactivity_timeout : undefined,
    signupEnabled: bool(auth.enable_signup, true),
    manualLinking: bool(auth.enable_manual_linking, false),
    minimumPasswordLength: number(auth.minimum_password_length, 6),
    emailConfirmations: bool(email.enable_confirmations, false),
    emailOtpExpiry: typeof email.otp_expiry === 'number' ? email.otp_expiry : undefined,
    emailOtpLength: otpLength(email.otp_length),
    secureEmailChange: bool(email.double_confirm_changes, true),
    recoveryTemplate:
      typeof recovery.content_path === 'string'
        ? { subject: typeof recovery.subject === 'string' ? recovery.subject : undefined, contentPath: path.resolve(ROOT, recovery.content_path) }
        : undefined,
    rateLimits: {
      emailSent: number(limits.email_sent, 30),
      signInSignUps: number(limits.sign_in_sign_ups, 30),
      tokenVerifications: number(limits.token_verifications, 30),
      tokenRefresh: number(limits.token_refresh, 150),
    },
  };
}
