import { AuthApiError } from '@supabase/supabase-js';
import { describe, expect, it } from 'vitest';
import { authRefusal } from './supabase.ts';

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
