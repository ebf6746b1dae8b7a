import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { type AuthServer, startAuthServer } from '../scripts/stack/auth-server.ts';
import { readAuthSettings } from '../scripts/stack/supabase-config.ts';
import { buildTestApp, TEST_JWT_SECRET } from './support/app.ts';
import { testSql, uniqueEmail } from './support/db.ts';
import { call, linkIn, messagesTo, realAuth, realAuthEnv } from './support/real-auth.ts';

// Sign up with e-mail confirmation on, as a hosted Supabase project has it by
// default (supabase/config.toml turns it off): the confirmation e-mail's link
// goes through the auth server's /verify to the site URL with a session, and
// until then sign-in says what is wrong. The suite runs an auth server of its
// own with confirmation on, on this run's database and SMTP sink.

const auth = realAuth();

describe.runIf(auth)('sign up with e-mail confirmation on, against the real Supabase Auth server', () => {
  let own: AuthServer;
  let app: FastifyInstance;
  let base: string;
  let siteUrl: string;
  const sql = testSql();
  const post = (path: string, body: unknown, token?: string) => call(base, 'POST', path, { body, token });

  beforeAll(async () => {
    const settings = await readAuthSettings();
    siteUrl = settings.siteUrl;
    own = await startAuthServer({
      binary: auth!.binary,
      databaseUrl: inject('stack').databaseUrl,
      jwtSecret: TEST_JWT_SECRET,
      settings: { ...settings, emailConfirmations: true },
      smtp: { host: '127.0.0.1', port: inject('stack').smtpPort },
      migrate: false,
    });
    app = await buildTestApp(realAuthEnv({ ...auth!, url: own.url, anonKey: own.anonKey, serviceRoleKey: own.serviceRoleKey }));
    base = await app.listen({ host: '127.0.0.1', port: 0 });
  }, 60_000);
  afterAll(async () => {
    await app?.close();
    await own?.stop();
    await sql.end();
  });

  /** Signs `email` up: 201 without a session; the confirmation e-mail's link. */
  async function signUpUnconfirmed(email: string, password: string): Promise<string> {
    const answer = await post('/api/auth/signup', { email, password, name: 'Pending User' });
    expect(answer.status).toBe(201);
    expect(answer.body.data).toMatchObject({ user: { email, name: 'Pending User' }, session: null });
    await expect.poll(async () => (await messagesTo(email)).length, { timeout: 10_000 }).toBe(1);
    // The link sits in an href, so its `&` are written `&amp;`.
    return linkIn((await messagesTo(email))[0]).replaceAll('&amp;', '&');
  }

  it("the confirmation e-mail's link passes the gateway to /auth/v1/verify and redirects to the site URL with a session; then the password signs in", { timeout: 30_000 }, async () => {
    const email = uniqueEmail('confirm');
    const password = 'confirm-me-1';
    const link = await signUpUnconfirmed(email, password);
    expect(link.startsWith(`${own.url}/auth/v1/verify?token=`)).toBe(true);

    const opened = await fetch(link, { redirect: 'manual' });
    expect([302, 303]).toContain(opened.status);
    const location = new URL(opened.headers.get('location')!);
    expect(`${location.origin}${location.pathname}`.replace(/\/$/, '')).toBe(siteUrl.replace(/\/$/, ''));
    const fragment = new URLSearchParams(location.hash.slice(1));
    expect(fragment.get('type')).toBe('signup');
    expect(fragment.get('refresh_token')).toEqual(expect.any(String));
    // The fragment's session is one the API takes.
    const me = await call(base, 'GET', '/api/auth/me', { token: fragment.get('access_token')! });
    expect(me.status).toBe(200);
    expect(me.body.data).toMatchObject({ email, name: 'Pending User' });

    const signedIn = await post('/api/auth/signin', { email, password });
    expect(signedIn.status).toBe(200);
    expect(signedIn.body.data.user.email).toBe(email);
    // Confirmed, the address is taken as with confirmation off.
    const again = await post('/api/auth/signup', { email, password: 'another-one', name: 'Someone Else' });
    expect(again.status).toBe(409);
    expect(again.body).toEqual({ success: false, error: 'User with this email already exists', statusCode: 409 });
  });

  it('sign in before confirming: the right password is 403 `Email not confirmed`, a wrong one still 401 `Invalid email or password`', { timeout: 30_000 }, async () => {
    const email = uniqueEmail('unconfirmed');
    const password = 'not-confirmed-1';
    await signUpUnconfirmed(email, password);

    const early = await post('/api/auth/signin', { email, password });
    expect(early.status).toBe(403);
    expect(early.body).toEqual({ success: false, error: 'Email not confirmed', statusCode: 403 });
    // Without the password nobody learns the account exists, let alone that it waits for confirmation.
    for (const body of [
      { email, password: 'wrong-password' },
      { email: uniqueEmail('nobody'), password },
    ]) {
      const refused = await post('/api/auth/signin', body);
      expect(refused.status).toBe(401);
      expect(refused.body).toEqual({ success: false, error: 'Invalid email or password', statusCode: 401 });
    }
  });

  it('signing up again with an address that waits for confirmation is 409 `User with this email already exists`, within the minute and after it, and sends no e-mail', { timeout: 30_000 }, async () => {
    const email = uniqueEmail('pending-twice');
    await signUpUnconfirmed(email, 'first-password');
    const conflict = { success: false, error: 'User with this email already exists', statusCode: 409 };
    const again = await post('/api/auth/signup', { email, password: 'second-password', name: 'Pending Again' });
    expect([again.status, again.body]).toEqual([409, conflict]);
    // A minute on, the auth server would send the confirmation again and answer with the waiting account.
    await sql`update auth.users set confirmation_sent_at = now() - interval '2 minutes' where email = ${email}`;
    const later = await post('/api/auth/signup', { email, password: 'third-password', name: 'Pending Later' });
    expect([later.status, later.body]).toEqual([409, conflict]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    expect(await messagesTo(email)).toHaveLength(1);
  });
});
