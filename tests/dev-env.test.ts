import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { parse } from 'dotenv';
import { describe, expect, it } from 'vitest';
import { checkServerConfig, type DevSecrets, rateLimitNote, serverEnv, type StackValues, withFrontEnd, withStack } from '../scripts/dev-env.ts';
import { ROOT } from '../scripts/stack/database.ts';
import { readAuthSettings } from '../scripts/stack/supabase-config.ts';
import { DEFAULT_CORS_ORIGIN, resetPasswordUrl } from '../src/config.ts';
import { apiAddress, configuredProjectLines } from '../scripts/dev.ts';
import { grantRoleCommand } from '../scripts/owner-hint.ts';

// What `npm run dev` hands the API it starts: development unless .env says
// otherwise, and the local stack's values. The stack's own auth server signs
// every token with its JWT secret, so the API must verify with that one (and
// name that auth server and its keys), whatever .env still holds.

const SECRETS: DevSecrets = {
  SUPABASE_JWT_SECRET: 'stack-jwt-secret',
  ADMIN_JWT_SECRET: 'stack-admin-secret',
  ANALYTICS_SALT_SECRET: 'stack-salt',
  OIDC_CLIENT_SECRET: 'stack-oidc',
};
const AUTH = { url: 'http://127.0.0.1:54321', anonKey: 'stack-anon', serviceRoleKey: 'stack-service', jwtSecret: SECRETS.SUPABASE_JWT_SECRET };
const STACK: StackValues = { databaseUrl: 'postgres://postgres@127.0.0.1:5432/portfolio_dev', mail: { smtpPort: 54325 }, auth: AUTH };

describe('npm run dev: the API environment', () => {
  it('is development unless .env says otherwise; set to nothing is unset', () => {
    expect(serverEnv({}).NODE_ENV).toBe('development');
    expect(serverEnv({ NODE_ENV: '' }).NODE_ENV).toBe('development');
    expect(serverEnv({ NODE_ENV: 'production' }).NODE_ENV).toBe('production');
  });

  it("with the stack's auth server, takes its JWT secret, URL and keys over values left in .env, and names them", () => {
    const left = { SUPABASE_JWT_SECRET: 'a-hosted-project-secret', SUPABASE_ANON_KEY: 'a-hosted-anon-key' };
    const { env, overridden } = withStack(serverEnv(left), STACK, SECRETS);
    expect(env).toMatchObject({
      SUPABASE_URL: AUTH.url,
      SUPABASE_ANON_KEY: AUTH.anonKey,
      SUPABASE_SERVICE_ROLE_KEY: AUTH.serviceRoleKey,
      SUPABASE_JWT_SECRET: AUTH.jwtSecret,
    });
    expect(overridden).toEqual(['SUPABASE_ANON_KEY', 'SUPABASE_JWT_SECRET']);
  });

  it('without an auth server, sets only the JWT secret of the four, and keeps one .env gives', () => {
    const { auth: _auth, ...withoutAuth } = STACK;
    const { env, overridden } = withStack(serverEnv({ SUPABASE_ANON_KEY: '' }), withoutAuth, SECRETS);
    expect(env.SUPABASE_JWT_SECRET).toBe(SECRETS.SUPABASE_JWT_SECRET);
    expect([env.SUPABASE_URL, env.SUPABASE_ANON_KEY, env.SUPABASE_SERVICE_ROLE_KEY]).toEqual([undefined, undefined, undefined]);
    expect(withStack(serverEnv({ SUPABASE_JWT_SECRET: 'mine' }), withoutAuth, SECRETS).env.SUPABASE_JWT_SECRET).toBe('mine');
    expect(overridden).toEqual([]);
  });

  it("takes the stack's database over one left in .env: the stack migrated it and its auth server writes accounts to it", () => {
    for (const stack of [STACK, { ...STACK, auth: undefined }]) {
      const left = { DATABASE_URL: 'postgres://authenticator@127.0.0.1:5432/some_other_db', DATABASE_OWNER_URL: 'postgres://postgres@127.0.0.1:5432/some_other_db' };
      const { env, overridden } = withStack(serverEnv(left), stack, SECRETS);
      expect(env).toMatchObject({ DATABASE_URL: 'postgres://authenticator@127.0.0.1:5432/portfolio_dev', DATABASE_OWNER_URL: STACK.databaseUrl });
      expect(overridden).toEqual(['DATABASE_URL', 'DATABASE_OWNER_URL']);
    }
  });

  it('fills what .env left empty and keeps what it gives: the API logs in as authenticator, scripts as the owner', () => {
    const { env } = withStack(serverEnv({ ADMIN_JWT_SECRET: 'mine', DATABASE_URL: '' }), STACK, SECRETS);
    expect(env).toMatchObject({
      ADMIN_JWT_SECRET: 'mine',
      ANALYTICS_SALT_SECRET: SECRETS.ANALYTICS_SALT_SECRET,
      DATABASE_URL: 'postgres://authenticator@127.0.0.1:5432/portfolio_dev',
      DATABASE_OWNER_URL: STACK.databaseUrl,
      SMTP_URL: 'smtp://127.0.0.1:54325',
    });
  });
});

describe('npm run dev: where reset links lead', () => {
  it("the front end's /reset-password, below FRONTEND_URL's path; the auth server of the local stack allows it", async () => {
    expect(resetPasswordUrl({ FRONTEND_URL: 'https://example.org/portfolio/', CORS_ORIGIN: DEFAULT_CORS_ORIGIN })).toBe('https://example.org/portfolio/reset-password');
    expect(resetPasswordUrl({ FRONTEND_URL: undefined, CORS_ORIGIN: DEFAULT_CORS_ORIGIN })).toBe('http://localhost:5173/reset-password');
    const fromConfig = await readAuthSettings();
    const allowed = withFrontEnd(fromConfig, { FRONTEND_URL: 'https://portfolio.example.org', CORS_ORIGIN: DEFAULT_CORS_ORIGIN }).redirectUrls;
    expect(allowed).toEqual([...fromConfig.redirectUrls, 'https://portfolio.example.org/reset-password']);
    // The default front end is listed once.
    expect(withFrontEnd(fromConfig, { FRONTEND_URL: undefined, CORS_ORIGIN: DEFAULT_CORS_ORIGIN }).redirectUrls).toEqual(fromConfig.redirectUrls);
  });
});

describe('npm run dev: the length of the codes in e-mails', () => {
  // A reset token is a hash of the address and this code: its length decides how many tokens an address can have.
  const settingsWith = async (otpLength: string) => {
    const dir = await mkdtemp(path.join(tmpdir(), 'otp-length-'));
    try {
      const file = path.join(dir, 'config.toml');
      await writeFile(file, `[auth.email]\n${otpLength}\n`);
      return await readAuthSettings(file);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  };

  it("supabase/config.toml asks for the auth server's longest, 10 digits; without the key its default (6) stays", async () => {
    expect((await readAuthSettings()).emailOtpLength).toBe(10);
    expect((await settingsWith('otp_expiry = 3600')).emailOtpLength).toBeUndefined();
    expect((await settingsWith('otp_length = 6')).emailOtpLength).toBe(6);
  });

  it('a length the auth server would quietly replace with 6 is refused, naming the key', async () => {
    for (const value of ['11', '5', '8.5', '"10"']) {
      await expect(settingsWith(`otp_length = ${value}`), value).rejects.toThrowError(/\[auth\.email\] otp_length must be a whole number from 6 to 10/);
    }
  });
});

describe('npm run dev: its configuration, checked before anything starts', () => {
  it('refuses a bad value .env gives, in the one config line', () => {
    expect(() => checkServerConfig(serverEnv({ TRUST_PROXY: 'true' }), { auth: true })).toThrowError(/^Invalid configuration: TRUST_PROXY is invalid \(true would trust/);
  });

  it('judges only what the local stack leaves to .env: the database and secrets it fills in are not missing', () => {
    expect(() => checkServerConfig(serverEnv({}), { auth: false })).not.toThrow();
    // Production's rules apply to what .env still decides: a secret the stack does not fill in.
    expect(() => checkServerConfig(serverEnv({ NODE_ENV: 'production' }), { auth: true })).toThrowError(/^Invalid configuration: CAPTCHA_SECRET is missing \([^)]*\)$/);
    // A weak JWT secret from .env is kept without an auth server, replaced with one.
    const weak = serverEnv({ NODE_ENV: 'production', CAPTCHA_PROVIDER: 'off', SUPABASE_JWT_SECRET: 'short' });
    expect(() => checkServerConfig(weak, { auth: false })).toThrowError(/SUPABASE_JWT_SECRET is invalid/);
    expect(() => checkServerConfig(weak, { auth: true })).not.toThrow();
  });

  it('with a hosted project, judges everything as given', () => {
    expect(() => checkServerConfig(serverEnv({ SUPABASE_URL: 'https://ref.supabase.co' }))).toThrowError(/^Invalid configuration: DATABASE_URL is missing$/);
  });
});

describe('npm run dev: the addresses it prints', () => {
  it('a wildcard HOST listens on all interfaces; the URL is the loopback address a browser can open', () => {
    expect(apiAddress('127.0.0.1', 3000)).toEqual({ base: 'http://127.0.0.1:3000' });
    expect(apiAddress('0.0.0.0', 3000)).toEqual({ base: 'http://127.0.0.1:3000', note: 'listening on all interfaces, HOST=0.0.0.0' });
    expect(apiAddress('::', 3000)).toEqual({ base: 'http://[::1]:3000', note: 'listening on all interfaces, HOST=::' });
    expect(apiAddress('::1', 8080)).toEqual({ base: 'http://[::1]:8080' });
  });

  it("the first admin's command names dev's database when .env names another (grant-role reads .env)", () => {
    const owner = STACK.databaseUrl;
    const plain = 'npm run grant-role -- <email> admin';
    expect(grantRoleCommand(serverEnv({}), owner)).toBe(plain);
    // A hosted project: grant-role's .env names the database the API uses.
    expect(grantRoleCommand(serverEnv({ DATABASE_URL: 'postgres://db.example.com/x' }), undefined)).toBe(plain);
    expect(grantRoleCommand(serverEnv({ DATABASE_OWNER_URL: owner, DATABASE_URL: 'postgres://db.example.com/x' }), owner)).toBe(plain);
    const left = { DATABASE_URL: 'postgres://authenticator@db.example.com:5432/postgres' };
    expect(withStack(serverEnv(left), STACK, SECRETS).overridden).toContain('DATABASE_URL');
    expect(grantRoleCommand(serverEnv(left), owner)).toBe(`DATABASE_OWNER_URL=${owner} ${plain}`);
    expect(grantRoleCommand(serverEnv({ DATABASE_OWNER_URL: 'postgres://postgres@db.example.com/postgres' }), owner)).toBe(`DATABASE_OWNER_URL=${owner} ${plain}`);
    // Quoted when the shell would read part of it.
    expect(grantRoleCommand(serverEnv(left), "postgres://postgres:p$'w@127.0.0.1/portfolio_dev")).toBe(
      `DATABASE_OWNER_URL='postgres://postgres:p$'\\''w@127.0.0.1/portfolio_dev' ${plain}`,
    );
  });
});

describe('npm run dev: what the banner says of the rate limits', () => {
  it("says they are production's while they are: unset, set to nothing, or as a copy of .env.example sets them", () => {
    const production = 'rate limits as in production, RATE_LIMIT_* in .env raise them';
    const example = parse(readFileSync(path.join(ROOT, '.env.example'), 'utf8'));
    expect(Object.keys(example).filter((name) => /^RATE_LIMIT_\w+_PER_/.test(name))).toHaveLength(6);
    expect(rateLimitNote({})).toBe(production);
    expect(rateLimitNote({ RATE_LIMIT_AUTH_PER_MIN: '', RATE_LIMIT_FEEDBACK_PER_15MIN: ' ' })).toBe(production);
    expect(rateLimitNote(example)).toBe(production);
  });

  it('names each budget set otherwise, with its value, every budget included', () => {
    expect(rateLimitNote({ RATE_LIMIT_FEEDBACK_PER_15MIN: '500', RATE_LIMIT_AUTH_PER_MIN: '10', RATE_LIMIT_GENERAL_PER_15MIN: '20' })).toBe(
      "rate limits not production's: RATE_LIMIT_FEEDBACK_PER_15MIN=500, RATE_LIMIT_GENERAL_PER_15MIN=20",
    );
    for (const name of ['RATE_LIMIT_RESET_PER_MIN', 'RATE_LIMIT_ACCOUNT_PER_MIN', 'RATE_LIMIT_INGEST_PER_15MIN']) {
      expect(rateLimitNote({ [name]: '99999' })).toBe(`rate limits not production's: ${name}=99999`);
    }
  });
});

describe('npm run dev with SUPABASE_URL and DATABASE_URL set', () => {
  it('says it uses that project and starts no local stack, naming the variables that decided it', () => {
    expect(configuredProjectLines('https://abc.supabase.co')).toEqual([
      'SUPABASE_URL and DATABASE_URL are set: using that project (https://abc.supabase.co); the local stack is not started.',
    ]);
    // `supabase start`'s gateway, or the stack's on another port: only the first line.
    expect(configuredProjectLines('http://127.0.0.1:54329')).toHaveLength(1);
  });

  it("the local stack's own gateway (values the stack printed, copied to .env): says nothing starts it now", () => {
    for (const url of ['http://127.0.0.1:54321', 'http://localhost:54321', 'http://[::1]:54321']) {
      expect(configuredProjectLines(url), url).toEqual([
        `SUPABASE_URL and DATABASE_URL are set: using that project (${url}); the local stack is not started.`,
        "  SUPABASE_URL is the local stack's own auth gateway (port 54321), which nothing starts now: unset both (in .env or the environment) for npm run dev to start the local stack.",
      ]);
    }
  });
});
