import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EmailSchema, boundedJsonObject } from '../src/lib/schemas.ts';
import { canonicalPath, referrerParts } from '../src/modules/analytics/enrich.ts';
import { SubmitFeedbackBodySchema } from '../src/modules/feedback/schemas.ts';
import { legacyAdmin } from './support/admin-auth.ts';
import { createWebsite as createAnalyticsWebsite } from './support/analytics.ts';
import { buildTestApp } from './support/app.ts';
import { createAuthUser, testSql } from './support/db.ts';
import { createWebsite, feedbackBody } from './support/feedback-fixtures.ts';
import { call, realAuth, useRealAuthApp } from './support/real-auth.ts';

// One text, one form: the e-mail rule every route shares (RFC 5322 atext,
// IDNA top-level labels, NFC), one spelling per analytics page, the CSV
// exports' byte order mark, and JSON keys counted in characters.

const sql = testSql();
let app: FastifyInstance;
let admin: { authorization: string };

beforeAll(async () => {
  app = await buildTestApp();
  admin = await legacyAdmin();
});
afterAll(async () => {
  await app?.close();
  await sql.end();
});

const ATEXT_SPECIALS = [...'!#$%&\'*+/=?^_`{|}~-'];
const accepted = (email: string) => EmailSchema.safeParse(email).success;

describe('the e-mail rule', () => {
  it('takes every RFC 5322 atext character and an IDNA (xn--) top-level label', () => {
    for (const special of ATEXT_SPECIALS) expect(accepted(`a${special}b@example.com`), special).toBe(true);
    expect(accepted(`${ATEXT_SPECIALS.join('')}@example.com`)).toBe(true);
    expect(accepted('x@example.xn--p1ai')).toBe(true);
    expect(accepted('x@xn--e1afmkfd.xn--p1ai')).toBe(true);
    expect(accepted(`${'a'.repeat(64)}@example.com`)).toBe(true);
  });

  it('refuses quoted local parts, comments, IP literals, non-ASCII text, dots out of place and overlong parts', () => {
    for (const email of [
      '"a b"@example.com', 'a(comment)@example.com', 'x@[192.0.2.1]', 'josé@example.com', 'x@пример.рф', 'a..b@example.com',
      '.a@example.com', 'a.@example.com', 'x@example.c0m', 'x@example.xn--', 'x@example.xn--a-', 'x@-a.com', 'x@a-.com', 'x@com',
      `${'a'.repeat(65)}@example.com`, `x@${'a'.repeat(64)}.com`, `${'a'.repeat(60)}@${`${'b'.repeat(48)}.`.repeat(4)}com`,
    ]) {
      expect(EmailSchema.safeParse(email).error?.issues.map((issue) => issue.message), email).toEqual(['Invalid email format']);
    }
  });

  it('reads the NFC form: decomposed and composed spellings are one address', () => {
    // U+212A KELVIN SIGN is canonically K: NFC makes it the ASCII letter before the pattern.
    expect(EmailSchema.parse(' \u212Aelvin@Example.com ')).toBe('kelvin@example.com');
  });

  it('sign-up checks the address with it (the auth server is unreachable here: 503 means it passed)', async () => {
    const unreachable = await buildTestApp({ SUPABASE_URL: 'http://127.0.0.1:1', SUPABASE_ANON_KEY: 'anon-key', SUPABASE_SERVICE_ROLE_KEY: 'service-key', AUTH_TIMEOUT_MS: '1500' });
    try {
      for (const email of ['a&b@example.com', 'x@example.xn--p1ai', 'a{b}|c~@example.com']) {
        const response = await unreachable.inject({ method: 'POST', url: '/api/auth/signup', payload: { email, password: 'secret1', name: 'Tester' } });
        expect(response.statusCode, `${email} ${response.body}`).toBe(503);
      }
      const refused = await unreachable.inject({ method: 'POST', url: '/api/auth/reset-password', payload: { email: '"a b"@example.com' } });
      expect(refused.json().details).toEqual({ email: ['Invalid email format'] });
    } finally {
      await unreachable.close();
    }
  });

  it('an admin finds a user whose address holds atext specials or an xn-- label', async () => {
    for (const email of [`a&b+${randomUUID().slice(0, 8)}@example.com`, `x-${randomUUID().slice(0, 8)}@example.xn--p1ai`]) {
      const user = await createAuthUser(sql, { email });
      const response = await app.inject({ method: 'GET', url: `/api/users/email/${encodeURIComponent(email)}`, headers: admin });
      expect([response.statusCode, response.json().data?.id], email).toEqual([200, user.id]);
    }
  });

  it('feedback takes these addresses too: `a&b@` is stored escaped, found by the email filter and exported as typed', async () => {
    const websiteId = await createWebsite(sql, 'Text forms');
    const email = `A&b+${randomUUID().slice(0, 8)}@example.xn--p1ai`;
    const created = await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody({ websiteId, email }) });
    expect(created.statusCode, created.body).toBe(201);
    const [row] = await sql`select email from public.feedback where id = ${created.json().data.id}`;
    expect(row.email).toBe(email.replace('&', '&amp;'));
    for (const url of [`/api/feedback/get-feedback?email=${encodeURIComponent(email.toLowerCase())}`, `/api/feedback/export?email=${encodeURIComponent(email)}`]) {
      const found = await app.inject({ url, headers: admin });
      expect(found.statusCode, url).toBe(200);
      if (url.includes('export')) expect(found.body.split('\r\n')[1]).toContain(`,${email},`);
      else expect(found.json().data.map((item: { id: string }) => item.id)).toEqual([created.json().data.id]);
    }
    // Broader than the account routes: an address only an admin replies to may be quoted, non-ASCII (RFC 6532)
    // or an IP literal, and a decomposed one is stored in NFC.
    for (const taken of ['"a b"@example.com', 'x@[192.0.2.1]', 'josé@example.com']) {
      expect(SubmitFeedbackBodySchema.safeParse(feedbackBody({ email: taken })).success, taken).toBe(true);
    }
    expect(SubmitFeedbackBodySchema.parse(feedbackBody({ email: 'jose\u0301@example.com' })).email).toBe('jos\u00e9@example.com');
    for (const refused of ['a..b@example.com', 'a b@example.com', 'x@example.c0m']) {
      expect(SubmitFeedbackBodySchema.safeParse(feedbackBody({ email: refused })).error?.issues.map((issue) => issue.message), refused).toEqual(['Invalid email format']);
    }
  });

  it('the feedback email filter compares NFC: a row stored composed is found by the decomposed spelling', async () => {
    const websiteId = await createWebsite(sql, 'Text forms NFC');
    // A row from before today's rule, which took non-ASCII letters; stored as the form sent it (NFC).
    const local = `jos\u00e9-${randomUUID().slice(0, 8)}`;
    const [{ id }] = await sql`
      insert into public.feedback (name, email, comment, rating, website_id)
      values ('José', ${`${local}@example.com`}, 'Stored under the older rule', 4, ${websiteId}) returning id`;
    const decomposed = `${local.normalize('NFD')}@example.com`;
    expect(decomposed).not.toBe(`${local}@example.com`);
    const found = await app.inject({ url: `/api/feedback/get-feedback?email=${encodeURIComponent(decomposed)}`, headers: admin });
    expect(found.json().data.map((item: { id: string }) => item.id)).toEqual([id]);
  });

  it('the feedback email filter finds a row stored decomposed before NFC, by either spelling', async () => {
    const websiteId = await createWebsite(sql, 'Text forms NFD');
    const local = `jose\u0301-${randomUUID().slice(0, 8)}`;
    const [{ id }] = await sql`
      insert into public.feedback (name, email, comment, rating, website_id)
      values ('José', ${`${local}@example.com`}, 'Stored decomposed under the older rule', 4, ${websiteId}) returning id`;
    for (const spelling of [local, local.normalize('NFC')]) {
      const found = await app.inject({ url: `/api/feedback/export?email=${encodeURIComponent(`${spelling.toUpperCase()}@example.com`)}`, headers: admin });
      expect(found.body.split('\r\n').filter((line) => line.startsWith(id)), spelling).toHaveLength(1);
    }
  });
});

// The real auth server (skipped without one): what the rule takes, it takes too,
// and the address is found again for a password reset.
const auth = realAuth();
describe.runIf(auth)('the e-mail rule against the auth server', () => {
  const listening = useRealAuthApp(auth!);
  it('signs up and resets the password of addresses with atext specials and an xn-- top-level label', { timeout: 60_000 }, async () => {
    const tag = randomUUID().slice(0, 8);
    for (const email of [`a&b=${tag}@example.com`, `!#$%*/?^\`{|}~${tag}@example.com`, `x${tag}@example.xn--p1ai`]) {
      const signedUp = await call(listening.base, 'POST', '/api/auth/signup', { body: { email, password: 'secret-password-1', name: 'Tester' } });
      expect([signedUp.status, signedUp.body.data?.user?.email], email).toEqual([201, email]);
      const reset = await call(listening.base, 'POST', '/api/auth/reset-password', { body: { email } });
      expect(reset.status, `${email} ${JSON.stringify(reset.body)}`).toBe(200);
    }
  });
});

describe('one spelling per analytics page', () => {
  it('decodes escapes of valid UTF-8, keeps / ? # % and control characters escaped in upper case, then NFC', () => {
    for (const page of ['/café', '/caf%C3%A9', '/caf%c3%a9', '/cafe\u0301']) expect(canonicalPath(page, 2048), page).toBe('/café');
    expect(canonicalPath('/a%20b', 2048)).toBe('/a b');
    expect(canonicalPath('/%F0%9F%98%80', 2048)).toBe('/😀');
    expect(canonicalPath('/a%2fb%3f%23%25%00%7f', 2048)).toBe('/a%2Fb%3F%23%25%00%7F');
    // Not UTF-8 (a lone lead byte, an overlong form, a surrogate, past U+10FFFF): left escaped, in upper case.
    expect(canonicalPath('/x%c3%28', 2048)).toBe('/x%C3(');
    for (const page of ['/%E0%80%80', '/%ED%A0%80', '/%F4%90%80%80', '/100%', '/%zz']) expect(canonicalPath(page.toLowerCase(), 2048), page).toBe(page);
    // The query is left as sent: an escape there can mean something.
    expect(canonicalPath('/caf%c3%a9?q=%c3%a9%26', 2048)).toBe('/café?q=%c3%a9%26');
    // NFC lengthens U+0958 (3 bytes) to two characters (6 bytes): a page that would outgrow the limit is kept as sent.
    expect(canonicalPath('/\u0958', 2048)).toBe('/\u0915\u093c');
    expect(canonicalPath(`/${'\u0958'.repeat(600)}`, 2048)).toBe(`/${'\u0958'.repeat(600)}`);
    expect(referrerParts('https://a.example/caf%c3%a9?x=1').stored).toBe('https://a.example/café');
  });

  it('four spellings of one page are one page of the summary, and stored so', async () => {
    const site = await createAnalyticsWebsite(app, 'Spellings');
    const spellings = ['/café', '/caf%C3%A9', '/caf%c3%a9', '/cafe\u0301', '/a b', '/a%20b'];
    for (const page of spellings) {
      const response = await app.inject({
        method: 'POST',
        url: '/api/analytics',
        payload: { websiteId: site.id, eventType: 'page_view', page, referrer: 'https://news.example/caf%c3%a9', userAgent: 'Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0', sessionId: randomUUID() },
      });
      expect(response.statusCode, `${page} ${response.body}`).toBe(201);
    }
    const stored = await sql`select distinct page, referrer from public.analytics_events where website_id = ${site.id} order by page`;
    expect(stored).toEqual([{ page: '/a b', referrer: 'https://news.example/café' }, { page: '/café', referrer: 'https://news.example/café' }]);
    const summary = await app.inject({ url: `/api/analytics?websiteId=${site.id}`, headers: admin });
    expect(summary.json().data.topPages).toEqual([{ page: '/café', views: 4 }, { page: '/a b', views: 2 }]);
  });
});

describe('CSV exports start with a UTF-8 byte order mark', () => {
  it('the feedback export: EF BB BF, then the header, and the text as typed', async () => {
    const websiteId = await createWebsite(sql, 'Text forms BOM');
    expect((await app.inject({ method: 'POST', url: '/api/feedback', payload: feedbackBody({ websiteId, name: 'Zoë 😀' }) })).statusCode).toBe(201);
    const response = await app.inject({ url: `/api/feedback/export?websiteId=${websiteId}`, headers: admin });
    expect(response.statusCode).toBe(200);
    expect([...response.rawPayload.subarray(0, 5)]).toEqual([0xef, 0xbb, 0xbf, 0x69, 0x64]);
    expect(response.body.split('\r\n')[1]).toContain(',Zoë 😀,');
  });
});

describe('JSON keys are counted in characters', () => {
  const metadata = boundedJsonObject('Metadata', 4096);
  it('100 emoji are a 100-character key; 101 are over', () => {
    expect(metadata.safeParse({ ['😀'.repeat(100)]: 1 }).success).toBe(true);
    expect(metadata.safeParse({ ['😀'.repeat(101)]: 1 }).error?.issues.map((issue) => issue.message)).toEqual(['Metadata keys must be at most 100 characters']);
    expect(metadata.safeParse({ ['a'.repeat(101)]: 1 }).success).toBe(false);
  });
});
