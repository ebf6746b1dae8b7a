import { describe, expect, it } from 'vitest';
import { type DevSecrets, serverEnv, type StackValues, withStack } from '../scripts/dev.ts';

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
