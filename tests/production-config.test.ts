import type { FastifyInstance } from 'fastify';
import { describe, expect, inject, it } from 'vitest';
import { freePort } from '../scripts/stack/free-port.ts';
import { ConfigError, parseConfig } from '../src/config.ts';
import { productionWarnings } from '../src/config-production.ts';
import { asLoginRole } from '../src/lib/database-url.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET, TEST_JWT_SECRET } from './support/app.ts';
import { exitWithin, startServer, untilHealthy } from './support/spawned-server.ts';

// Production is the default, and it refuses to start on a missing or weak
// secret unless the operator turns the feature off by name: a forgotten
// CAPTCHA_SECRET must not switch the bot check off silently.

const SECRETS = {
  SUPABASE_JWT_SECRET: TEST_JWT_SECRET,
  ADMIN_JWT_SECRET: TEST_ADMIN_JWT_SECRET,
  ANALYTICS_SALT_SECRET: 'analytics-salt-secret-0123456789abcdef-0123',
  CAPTCHA_SECRET: '0x4AAAAAAAtest-captcha-secret',
  CAPTCHA_HOSTNAMES: 'portfolio.example.org',
};

describe('production configuration', () => {
  it('NODE_ENV unset is production, which names every missing secret on one line', () => {
    expect(() => parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x' })).toThrow(ConfigError);
    let message = '';
    try {
      parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x' });
    } catch (error) {
      message = (error as Error).message;
    }
    expect(message.split('\n')).toHaveLength(1);
    for (const name of ['CAPTCHA_SECRET', 'ADMIN_JWT_SECRET', 'ANALYTICS_SALT_SECRET', 'SUPABASE_JWT_SECRET']) {
      expect(message).toContain(`${name} is missing`);
    }
    expect(parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x', ...SECRETS }).NODE_ENV).toBe('production');
  });

  it('names the missing secrets together with every other bad or missing variable', () => {
    expect(() => parseConfig({ PORT: 'eighty' })).toThrowError(
      /^Invalid configuration: PORT is invalid .*; DATABASE_URL is missing; CAPTCHA_SECRET is missing .*; ADMIN_JWT_SECRET is missing .*; ANALYTICS_SALT_SECRET is missing .*; SUPABASE_JWT_SECRET is missing/,
    );
    // An invalid secret or switch is named once, as invalid, and the other checks still run.
    const { ADMIN_JWT_SECRET: _admin, ...rest } = SECRETS;
    expect(() => parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x', ...rest, LEGACY_ADMIN_TOKEN: 'maybe', ANALYTICS_SALT_SECRET: 'short', CAPTCHA_SECRET: '' })).toThrowError(
      /^Invalid configuration: LEGACY_ADMIN_TOKEN is invalid .*; ANALYTICS_SALT_SECRET is invalid .*; CAPTCHA_SECRET is missing .*; ADMIN_JWT_SECRET is missing \([^)]*\)$/,
    );
    // An invalid NODE_ENV may or may not mean production: it alone is named.
    expect(() => parseConfig({ NODE_ENV: 'prod', DATABASE_URL: 'postgres://x@127.0.0.1/x' })).toThrowError(/^Invalid configuration: NODE_ENV is invalid [^;]*$/);
  });

  it('a weak project JWT secret is refused in production', () => {
    expect(() => parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x', ...SECRETS, SUPABASE_JWT_SECRET: 'short' })).toThrow(
      /SUPABASE_JWT_SECRET is invalid/,
    );
  });

  it('production that sends e-mail refuses the development sender no-reply@localhost, which no provider delivers', () => {
    const base = { DATABASE_URL: 'postgres://x@127.0.0.1/x', ...SECRETS };
    for (const transport of [{ RESEND_API_KEY: 're_test_key' }, { SMTP_URL: 'smtp://mail.example.com:587' }]) {
      expect(() => parseConfig({ ...base, ...transport }), JSON.stringify(transport)).toThrowError(
        /^Invalid configuration: EMAIL_FROM is missing \(required in production when e-mail is sent: an address on a domain the provider accepts, not no-reply@localhost\)$/,
      );
      expect(() => parseConfig({ ...base, ...transport, EMAIL_FROM: 'Ops <ops@localhost>' })).toThrowError(/EMAIL_FROM is invalid/);
      expect(parseConfig({ ...base, ...transport, EMAIL_FROM: 'Portfolio <feedback@example.com>' }).EMAIL_FROM).toBe('Portfolio <feedback@example.com>');
    }
    // Without a transport nothing is sent (notifications wait in the outbox): no sender needed; nor
    // for an SMTP server on this machine (the local stack's sink, a relay that rewrites senders).
    expect(parseConfig(base).EMAIL_FROM).toBe('Portfolio <no-reply@localhost>');
    expect(parseConfig({ ...base, SMTP_URL: 'smtp://127.0.0.1:54325' }).EMAIL_FROM).toBe('Portfolio <no-reply@localhost>');
    // An SMTP URL that does not parse is named as such, not a crash of this check.
    expect(() => parseConfig({ ...base, SMTP_URL: 'smtp://mail.example.com:99999' })).toThrowError(/^Invalid configuration: SMTP_URL is invalid/);
    // Development keeps its default.
    expect(parseConfig({ ...base, NODE_ENV: 'development', RESEND_API_KEY: 're_test_key' }).EMAIL_FROM).toBe('Portfolio <no-reply@localhost>');
  });

  it('ADMIN_URL over plain http is refused in production, where notification e-mails link to it; on this machine it is not', () => {
    const base = { DATABASE_URL: 'postgres://x@127.0.0.1/x', ...SECRETS };
    expect(() => parseConfig({ ...base, ADMIN_URL: 'http://admin.example.com/admin' })).toThrowError(
      /^Invalid configuration: ADMIN_URL is invalid \(in production, an https:\/\/ address: notification e-mails link to the admin pages there\)$/,
    );
    for (const allowed of ['https://admin.example.com/admin', 'http://localhost:5173/admin', 'http://127.0.0.1:8080/admin']) {
      expect(parseConfig({ ...base, ADMIN_URL: allowed }).ADMIN_URL).toBe(allowed);
    }
    expect(parseConfig({ ...base, NODE_ENV: 'development', ADMIN_URL: 'http://admin.example.com/admin' }).ADMIN_URL).toBe('http://admin.example.com/admin');
  });

  it('features without a secret are turned off by name: CAPTCHA_PROVIDER=off, LEGACY_ADMIN_TOKEN=off', () => {
    const { CAPTCHA_SECRET: _captcha, ADMIN_JWT_SECRET: _admin, ...rest } = SECRETS;
    expect(() => parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x', ...rest })).toThrow(/CAPTCHA_SECRET is missing.*ADMIN_JWT_SECRET is missing/);
    const config = parseConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x', ...rest, CAPTCHA_PROVIDER: 'off', LEGACY_ADMIN_TOKEN: 'off' });
    expect(config).toMatchObject({ NODE_ENV: 'production', CAPTCHA_PROVIDER: 'off', LEGACY_ADMIN_TOKEN: 'off' });
  });

  it('LEGACY_ADMIN_TOKEN=off refuses legacy tokens even with a secret set', async () => {
    const app: FastifyInstance = await buildTestApp({ LEGACY_ADMIN_TOKEN: 'off' });
    try {
      const token = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, 'ops');
      const response = await app.inject({ method: 'GET', url: '/api/feedback/get-feedback', headers: { authorization: `Bearer ${token}` } });
      expect(response.statusCode).toBe(401);
    } finally {
      await app.close();
    }
  });

  it("warns of what is right on a developer's machine and wrong on a server: a front end on localhost, a remote database without TLS", () => {
    const production = (env: Record<string, string>) => productionWarnings(parseConfig({ NODE_ENV: 'production', ...SECRETS, ...env }));
    const remote = { CORS_ORIGIN: 'https://portfolio.example.org' };
    const local = 'postgres://api@127.0.0.1/x';
    expect(production({ ...remote, DATABASE_URL: 'postgres://api@db.example.supabase.co:5432/postgres' })).toEqual([
      "DATABASE_URL connects to db.example.supabase.co without asking for TLS: add ?sslmode=require (or verify-full with the server's CA) to the URL",
    ]);
    // A host parameter names where the driver really connects.
    expect(production({ ...remote, DATABASE_URL: 'postgres://api@localhost/x?host=db.example.org' })).toEqual([
      "DATABASE_URL connects to db.example.org without asking for TLS: add ?sslmode=require (or verify-full with the server's CA) to the URL",
    ]);
    for (const url of [
      'postgres://api@db.example.supabase.co/postgres?sslmode=require',
      'postgres://api@db.example.supabase.co/postgres?sslmode=disable',
      'postgres://api@db.example.supabase.co/postgres?sslrootcert=system',
      'postgres://api@127.0.0.1:5432/x',
      'postgres://api@localhost/x',
      // Unix sockets, as .env.example names them.
      'postgres://api@%2Fvar%2Frun%2Fpostgresql/x',
      'postgres://api@db.example.org/x?host=/var/run/postgresql',
    ]) {
      expect(production({ ...remote, DATABASE_URL: url }), url).toEqual([]);
    }
    // A bot check that takes a token solved on anyone's page.
    expect(production({ ...remote, DATABASE_URL: local, CAPTCHA_HOSTNAMES: '' })).toEqual([
      'CAPTCHA_HOSTNAMES is empty: a captcha token solved on any page that embeds the (public) site key passes the bot check; list the hosts the widget is served on',
    ]);
    expect(production({ ...remote, DATABASE_URL: local, CAPTCHA_HOSTNAMES: '', CAPTCHA_PROVIDER: 'off' })).toEqual([]);
    // A copy of .env.example: browsers refused, and every e-mail linking to localhost.
    expect(production({ DATABASE_URL: local })).toEqual([
      "CORS_ORIGIN is http://localhost:5173, on this machine: browsers on the front end's public address are refused; set it to that address",
      "reset and notification e-mails link to http://localhost:5173 (CORS_ORIGIN), on this machine: set FRONTEND_URL to the front end's public address",
    ]);
    // Each setting for what it does: the e-mails link to public addresses here.
    expect(production({ DATABASE_URL: local, FRONTEND_URL: 'https://portfolio.example.org' })).toEqual([
      "CORS_ORIGIN is http://localhost:5173, on this machine: browsers on the front end's public address are refused; set it to that address",
    ]);
    expect(production({ ...remote, DATABASE_URL: local, FRONTEND_URL: 'http://127.0.0.1:8080/site', ADMIN_URL: 'https://admin.example.org' })).toEqual([
      "reset e-mails link to http://127.0.0.1:8080/site (FRONTEND_URL), on this machine: set FRONTEND_URL to the front end's public address",
    ]);
    expect(production({ ...remote, DATABASE_URL: local, ADMIN_URL: 'http://localhost:3001/admin' })).toEqual([
      "ADMIN_URL is http://localhost:3001/admin, on this machine: notification e-mails link there; set it to the admin pages' public address",
    ]);
    expect(productionWarnings(parseConfig({ NODE_ENV: 'development', DATABASE_URL: 'postgres://api@db.example.supabase.co/postgres' }))).toEqual([]);
  });

  it('npm start without NODE_ENV and without secrets stops with one config line, exit code 1', async () => {
    const server = startServer({ DATABASE_URL: inject('stack').databaseUrl, PORT: '0' });
    expect(await exitWithin(server, 8_000)).toBe(1);
    expect(server.output().trim().split('\n')).toEqual([expect.stringMatching(/^Invalid configuration: .*CAPTCHA_SECRET is missing/)]);
  });

  it('npm start with nothing set stops with one line naming DATABASE_URL and every missing secret', async () => {
    const server = startServer({});
    expect(await exitWithin(server, 8_000)).toBe(1);
    const [line, ...rest] = server.output().trim().split('\n');
    expect(rest).toEqual([]);
    expect(line).toMatch(/^Invalid configuration: DATABASE_URL is missing; /);
    for (const name of ['CAPTCHA_SECRET', 'ADMIN_JWT_SECRET', 'ANALYTICS_SALT_SECRET', 'SUPABASE_JWT_SECRET']) expect(line).toContain(`${name} is missing`);
  });

  it('production without ANALYTICS_SALT_SECRET stops with one config line, not a stack trace', async () => {
    const { ANALYTICS_SALT_SECRET: _salt, ...rest } = SECRETS;
    const server = startServer({ NODE_ENV: 'production', DATABASE_URL: inject('stack').databaseUrl, PORT: '0', ...rest });
    expect(await exitWithin(server, 8_000)).toBe(1);
    expect(server.output().trim().split('\n')).toEqual([expect.stringMatching(/^Invalid configuration: ANALYTICS_SALT_SECRET is missing/)]);
  });

  it('npm start without SUPABASE_URL serves, and says at the start that accounts are off', async () => {
    const port = await freePort();
    const server = startServer({ DATABASE_URL: asLoginRole(inject('stack').databaseUrl), PORT: String(port), LOG_LEVEL: 'warn', FEEDBACK_OUTBOX_WORKER: 'false', ...SECRETS });
    try {
      let response: Response | undefined;
      for (let attempt = 0; attempt < 150 && !response; attempt += 1) {
        response = await fetch(`http://127.0.0.1:${port}/api/auth/signin`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"email":"a@b.co","password":"secret1"}' }).catch(() => undefined);
        if (!response) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      expect(response?.status, server.output()).toBe(503);
      expect(server.output()).toContain('Supabase Auth is not configured (SUPABASE_URL, SUPABASE_ANON_KEY)');
      // The development front end, kept from .env.example: said at the start.
      await expect.poll(() => server.output()).toContain("CORS_ORIGIN is http://localhost:5173, on this machine: browsers on the front end's public address are refused");
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
    }
  });

  it('the start says where rate limits are counted: in process memory, or in Redis at its host and port (never its password)', async () => {
    const stores = [
      [{}, { rateLimitStore: 'memory', msg: 'rate limits are counted in process memory (REDIS_URL unset): each instance counts alone, and a restart forgets the counts' }],
      [
        { REDIS_URL: 'redis://:SecretRedisPW@127.0.0.1:6379/3' },
        { rateLimitStore: 'redis', redis: '127.0.0.1:6379', msg: 'rate limits are counted in Redis at 127.0.0.1:6379, shared by every instance that uses it' },
      ],
    ] as const;
    for (const [env, entry] of stores) {
      const port = await freePort();
      const server = startServer({ DATABASE_URL: asLoginRole(inject('stack').databaseUrl), PORT: String(port), LOG_LEVEL: 'info', FEEDBACK_OUTBOX_WORKER: 'false', ...SECRETS, ...env });
      try {
        await untilHealthy(server, `http://127.0.0.1:${port}`);
        await expect.poll(() => server.output()).toContain('rate limits are counted');
        const line = server.output().split('\n').find((text) => text.includes('rate limits are counted')) ?? '';
        expect(JSON.parse(line)).toMatchObject({ level: 30, ...entry });
        expect(server.output()).not.toContain('SecretRedisPW');
      } finally {
        server.child.kill('SIGTERM');
        await server.exited;
      }
    }
  });

  it('npm start without NODE_ENV but with every secret runs as production: HSTS on', async () => {
    const port = await freePort();
    const server = startServer({
      DATABASE_URL: asLoginRole(inject('stack').databaseUrl),
      PORT: String(port),
      LOG_LEVEL: 'error',
      FEEDBACK_OUTBOX_WORKER: 'false',
      ...SECRETS,
    });
    try {
      const response = await untilHealthy(server, `http://127.0.0.1:${port}`);
      expect(response.status, server.output()).toBe(200);
      expect(response.headers.get('strict-transport-security')).toMatch(/max-age=\d+/);
    } finally {
      server.child.kill('SIGTERM');
      await server.exited;
    }
  });
});
