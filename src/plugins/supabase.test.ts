import { Writable } from 'node:stream';
import { AuthApiError } from '@supabase/supabase-js';
import Fastify from 'fastify';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../config.ts';
import supabasePlugin, { authRefusal } from './supabase.ts';

// How the auth server's refusals reach the client: by error code, never by
// its message text. Our own checks mirror its rules, so the real server
// cannot be made to answer most of these (tests/auth-flows.test.ts has the
// reachable ones); its errors are built here as supabase-js builds them.

describe('authRefusal', () => {
  it('an address the auth server refuses is our validation error on email', () => {
    for (const code of ['email_address_invalid', 'validation_failed']) {
      expect(authRefusal(new AuthApiError('Unable to validate email address: invalid format', 400, code)), code).toMatchObject({
        statusCode: 400,
        message: 'Validation failed',
        details: { email: ['Invalid email format'] },
      });
    }
  });

  it('a weak password is a validation error on password, with the reason', () => {
    expect(authRefusal(new AuthApiError('Password should contain at least one character of each: a-z', 422, 'weak_password'))).toMatchObject({
      statusCode: 400,
      details: { password: ['Password should contain at least one character of each: a-z'] },
    });
  });

  it('any other refusal keeps the auth server\'s message, whatever it mentions', () => {
    const refusal = authRefusal(new AuthApiError('Email address "a@b.test" cannot be used as it is not authorized', 400, 'email_address_not_authorized'));
    expect(refusal).toMatchObject({ statusCode: 400, message: 'Email address "a@b.test" cannot be used as it is not authorized' });
    expect(refusal.details).toBeUndefined();
  });
});

describe('the start of an API whose auth settings are incomplete', () => {
  /** The warnings the plugin logs when registered with these settings. */
  async function warningsWith(settings: Record<string, string>): Promise<string[]> {
    const lines: string[] = [];
    const stream = new Writable({
      write(chunk, _encoding, done) {
        lines.push(JSON.parse(String(chunk)).msg);
        done();
      },
    });
    const app = Fastify({ logger: { level: 'warn', stream } });
    await app.register(supabasePlugin, { config: parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', ...settings }) });
    await app.close();
    return lines;
  }

  it('says so when accounts are off, and when only the admin key is missing, naming what it stops', async () => {
    expect(await warningsWith({})).toEqual([expect.stringMatching(/^Supabase Auth is not configured \(SUPABASE_URL, SUPABASE_ANON_KEY\)/)]);
    const withoutServiceKey = await warningsWith({ SUPABASE_URL: 'http://127.0.0.1:54321', SUPABASE_ANON_KEY: 'anon' });
    expect(withoutServiceKey).toEqual([expect.stringMatching(/^SUPABASE_SERVICE_ROLE_KEY is not set: an admin creating a user or changing a user's e-mail .*503/)]);
    expect(await warningsWith({ SUPABASE_URL: 'http://127.0.0.1:54321', SUPABASE_ANON_KEY: 'anon', SUPABASE_SERVICE_ROLE_KEY: 'service' })).toEqual([]);
  });
});
