import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config.ts';
import { buildTestAppWithLog } from './support/app.ts';
import { testSql } from './support/db.ts';
import { feedbackBody } from './support/feedback-fixtures.ts';
import { type SiteverifyStandIn, startSiteverifyStandIn } from './support/siteverify-stand-in.ts';

// A site key is public: anyone can put our widget on a page of their own,
// solve it there, and send us a token siteverify calls `success: true`. With
// CAPTCHA_HOSTNAMES (and, for Turnstile, CAPTCHA_ACTION) set, a passed token
// counts only when the provider says it was solved on one of our hosts.

const SECRET = 'captcha-secret-for-hostname-tests';
const PASS = 'token-solved-somewhere';
const FAILED = { success: false, error: 'Bot verification failed', statusCode: 400 };
const sql = testSql();
afterAll(() => sql.end());

interface LogLine {
  level: number;
  msg: string;
  provider?: string;
  reason?: string;
  captchaHostname?: string | null;
  captchaAction?: string | null;
}

/** A test app over a fresh stand-in, its warn lines captured. */
async function botCheckedApp(provider: 'turnstile' | 'hcaptcha', settings: Record<string, string>) {
  const siteverify = await startSiteverifyStandIn({ secret: SECRET, passToken: PASS });
  const { app, lines } = await buildTestAppWithLog(
    { CAPTCHA_PROVIDER: provider, CAPTCHA_SECRET: SECRET, CAPTCHA_VERIFY_URL: siteverify.url, ...settings },
    'warn',
  );
  return { app, siteverify, lines };
}

/** Submits with the passing token; returns the response, what the stand-in was asked, and the warn lines logged meanwhile. */
async function submit(target: { app: FastifyInstance; siteverify: SiteverifyStandIn; lines: string[] }, comment = `Comment ${crypto.randomUUID()}`) {
  const asked = target.siteverify.requests.length;
  const logged = target.lines.length;
  const response = await target.app.inject({
    method: 'POST',
    url: '/api/feedback',
    payload: feedbackBody({ comment, captchaToken: PASS }),
    remoteAddress: '203.0.113.9',
  });
  const warnings = target.lines
    .slice(logged)
    .map((line) => JSON.parse(line) as LogLine)
    // Every 4xx has its `request refused` line; what the bot check says is the rest.
    .filter((line) => line.level >= 40 && line.msg !== 'request refused');
  return { response, asked: target.siteverify.requests.slice(asked), warnings, raw: target.lines.slice(logged).join('') };
}

const storedWith = async (comment: string) => (await sql`select 1 from public.feedback where comment = ${comment}`).length;

for (const provider of ['turnstile', 'hcaptcha'] as const) {
  describe(`CAPTCHA_HOSTNAMES with ${provider}`, () => {
    let target: Awaited<ReturnType<typeof botCheckedApp>>;
    beforeAll(async () => {
      // Written as an operator might: spaces, a capital, an empty entry.
      target = await botCheckedApp(provider, { CAPTCHA_HOSTNAMES: ' Portfolio.example.org, www.portfolio.example.org,,' });
    });
    afterAll(async () => {
      await target?.app.close();
      await target?.siteverify.stop();
    });

    it('a token solved on a listed hostname passes (201), verified with secret, response and client IP', async () => {
      target.siteverify.hostname = 'www.portfolio.example.org';
      const { response, asked, warnings } = await submit(target);
      expect(response.statusCode, response.body).toBe(201);
      expect(asked).toEqual([{ contentType: expect.stringMatching(/^application\/x-www-form-urlencoded/), form: { secret: SECRET, response: PASS, remoteip: '203.0.113.9' } }]);
      expect(warnings).toEqual([]);
    });

    it('hostnames are compared without case, on either side', async () => {
      for (const hostname of ['portfolio.example.org', 'WWW.Portfolio.Example.ORG']) {
        target.siteverify.hostname = hostname;
        const { response, asked } = await submit(target);
        expect(response.statusCode, `${hostname}: ${response.body}`).toBe(201);
        expect(asked).toHaveLength(1);
      }
    });

    it('a token solved on another hostname is a failed bot check: 400, nothing stored, the hostname logged at warn', async () => {
      // Neither a look-alike nor a subdomain of a listed host is that host.
      for (const hostname of ['attacker.example', 'portfolio.example.org.attacker.example', 'evil.portfolio.example.org']) {
        target.siteverify.hostname = hostname;
        const comment = `Solved elsewhere ${crypto.randomUUID()}`;
        const { response, asked, warnings, raw } = await submit(target, comment);
        expect(response.statusCode, hostname).toBe(400);
        expect(response.json()).toEqual(FAILED);
        expect(asked).toHaveLength(1);
        expect(await storedWith(comment)).toBe(0);
        expect(warnings).toEqual([
          expect.objectContaining({ level: 40, msg: 'bot verification failed', provider, reason: 'hostname not in CAPTCHA_HOSTNAMES', captchaHostname: hostname }),
        ]);
        expect(raw).not.toContain(PASS);
      }
    });

    it('a pass that names no hostname is a failed bot check too, logged as such', async () => {
      for (const hostname of [undefined, '']) {
        target.siteverify.hostname = hostname;
        const comment = `No hostname ${crypto.randomUUID()}`;
        const { response, asked, warnings, raw } = await submit(target, comment);
        expect(response.statusCode, JSON.stringify(hostname)).toBe(400);
        expect(response.json()).toEqual(FAILED);
        expect(asked).toHaveLength(1);
        expect(await storedWith(comment)).toBe(0);
        expect(warnings).toEqual([expect.objectContaining({ msg: 'bot verification failed', provider, reason: 'siteverify named no hostname', captchaHostname: null })]);
        expect(raw).not.toContain(PASS);
      }
    });
  });
}

describe('CAPTCHA_ACTION (Turnstile)', () => {
  let target: Awaited<ReturnType<typeof botCheckedApp>>;
  beforeAll(async () => {
    target = await botCheckedApp('turnstile', { CAPTCHA_HOSTNAMES: 'portfolio.example.org', CAPTCHA_ACTION: 'feedback' });
    target.siteverify.hostname = 'portfolio.example.org';
  });
  afterAll(async () => {
    await target?.app.close();
    await target?.siteverify.stop();
  });

  it('the expected action on a listed hostname passes', async () => {
    target.siteverify.action = 'feedback';
    const { response, asked } = await submit(target);
    expect(response.statusCode, response.body).toBe(201);
    expect(asked).toHaveLength(1);
  });

  it('another action, one of another case, or none is a failed bot check, logged with the action seen', async () => {
    for (const action of ['login', 'Feedback', undefined]) {
      target.siteverify.action = action;
      const comment = `Other action ${crypto.randomUUID()}`;
      const { response, asked, warnings, raw } = await submit(target, comment);
      expect(response.statusCode, String(action)).toBe(400);
      expect(response.json()).toEqual(FAILED);
      expect(asked).toHaveLength(1);
      expect(await storedWith(comment)).toBe(0);
      expect(warnings).toEqual([
        expect.objectContaining({ msg: 'bot verification failed', reason: 'action is not CAPTCHA_ACTION', captchaAction: action ?? null, captchaHostname: 'portfolio.example.org' }),
      ]);
      expect(raw).not.toContain(PASS);
    }
  });

  it('the right action does not excuse an unlisted hostname', async () => {
    target.siteverify.action = 'feedback';
    target.siteverify.hostname = 'attacker.example';
    try {
      const { response, warnings } = await submit(target);
      expect(response.statusCode).toBe(400);
      expect(warnings).toEqual([expect.objectContaining({ reason: 'hostname not in CAPTCHA_HOSTNAMES', captchaHostname: 'attacker.example' })]);
    } finally {
      target.siteverify.hostname = 'portfolio.example.org';
    }
  });
});

describe('CAPTCHA_HOSTNAMES and CAPTCHA_ACTION empty', () => {
  let target: Awaited<ReturnType<typeof botCheckedApp>>;
  beforeAll(async () => {
    target = await botCheckedApp('turnstile', { CAPTCHA_HOSTNAMES: '', CAPTCHA_ACTION: '' });
  });
  afterAll(async () => {
    await target?.app.close();
    await target?.siteverify.stop();
  });

  it('neither is checked, as before: any pass is a pass, a refused token still fails', async () => {
    for (const [hostname, action] of [
      ['attacker.example', 'login'],
      [undefined, undefined],
    ] as const) {
      target.siteverify.hostname = hostname;
      target.siteverify.action = action;
      const { response, asked, warnings } = await submit(target);
      expect(response.statusCode, `${hostname}: ${response.body}`).toBe(201);
      expect(asked).toHaveLength(1);
      expect(warnings).toEqual([]);
    }
    const refused = await target.app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody({ captchaToken: 'forged' }) });
    expect(refused.statusCode).toBe(400);
    expect(refused.json()).toEqual(FAILED);
  });
});

describe('the settings as written', () => {
  const DEVELOPMENT = { NODE_ENV: 'development', DATABASE_URL: 'postgres://x@127.0.0.1/x' };
  const refusal = (env: Record<string, string>) => {
    try {
      parseConfig({ ...DEVELOPMENT, ...env });
    } catch (error) {
      return (error as Error).message;
    }
    throw new Error('accepted');
  };

  it('hostnames are kept lower-cased; empty means none', () => {
    expect(parseConfig({ ...DEVELOPMENT, CAPTCHA_HOSTNAMES: 'A.Example.com, b.example.com' }).CAPTCHA_HOSTNAMES).toEqual(['a.example.com', 'b.example.com']);
    expect(parseConfig({ ...DEVELOPMENT, CAPTCHA_HOSTNAMES: '' }).CAPTCHA_HOSTNAMES).toEqual([]);
    expect(parseConfig(DEVELOPMENT).CAPTCHA_HOSTNAMES).toEqual([]);
    expect(parseConfig(DEVELOPMENT).CAPTCHA_ACTION).toBeUndefined();
  });

  it('a URL, a port or a path in CAPTCHA_HOSTNAMES is refused: no provider answers one, so every token would fail', () => {
    for (const value of ['https://example.com', 'example.com:443', 'example.com/contact', 'example.com, *.example.com']) {
      expect(refusal({ CAPTCHA_HOSTNAMES: value }), value).toBe(
        'Invalid configuration: CAPTCHA_HOSTNAMES is invalid (must be hostnames, comma-separated, such as www.example.com (no scheme, port or path))',
      );
    }
  });

  it("CAPTCHA_ACTION is a Turnstile action, and refused with hCaptcha, which answers none", () => {
    expect(refusal({ CAPTCHA_ACTION: 'submit feedback' })).toBe(
      'Invalid configuration: CAPTCHA_ACTION is invalid (must be up to 32 letters, digits, _ or - (the action the Turnstile widget is given))',
    );
    expect(refusal({ CAPTCHA_ACTION: 'a'.repeat(33) })).toMatch(/^Invalid configuration: CAPTCHA_ACTION is invalid/);
    expect(parseConfig({ ...DEVELOPMENT, CAPTCHA_ACTION: 'feedback-form_1' }).CAPTCHA_ACTION).toBe('feedback-form_1');
    expect(refusal({ CAPTCHA_PROVIDER: 'hcaptcha', CAPTCHA_ACTION: 'feedback' })).toBe(
      "Invalid configuration: CAPTCHA_ACTION is invalid (Turnstile's only: hCaptcha answers no action, so every token would be refused)",
    );
  });
});
