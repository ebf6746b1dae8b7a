import { createHash, randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebsitesService } from '../src/modules/websites/service.ts';
import { buildTestApp } from './support/app.ts';
import { ANALYTICS_TABLES, adminToken, createWebsite, insertEventsInBulk } from './support/analytics.ts';
import { asUser, createAuthUser, grantRole, openTransaction, readsDuring, testSql, untilWaitingOnLock } from './support/db.ts';

// Websites (issue 5) over HTTP with the legacy admin token (Supabase user
// sessions need the auth server, which this stack cannot run), and the same
// rules per role proven in Postgres as each user.

const sql = testSql();
afterAll(() => sql.end());

const WEBSITE = {
  id: expect.any(String),
  name: expect.any(String),
  domain: expect.any(String),
  apiKeyPrefix: expect.stringMatching(/^wsk_.{8}$/),
  settings: expect.any(Object),
  metadata: expect.any(Object),
  createdBy: null,
  createdAt: expect.any(String),
  updatedAt: expect.any(String),
};

describe('websites routes', () => {
  let app: FastifyInstance;
  let auth: { authorization: string };
  beforeAll(async () => {
    app = await buildTestApp();
    auth = { authorization: `Bearer ${await adminToken()}` };
  });
  afterAll(async () => app?.close());

  const create = (payload: object) => app.inject({ method: 'POST', url: '/api/websites', headers: auth, payload });

  it('POST → 201 with the API key in full, once; only its hash and prefix are stored', async () => {
    const response = await create({ name: 'Portfolio', domain: 'Portfolio.Example.com', settings: { theme: 'dark' }, metadata: { owner: 'me' } });
    expect(response.statusCode).toBe(201);
    const { data } = response.json();
    expect(data).toEqual({
      ...WEBSITE,
      name: 'Portfolio',
      domain: 'portfolio.example.com',
      settings: { theme: 'dark' },
      metadata: { owner: 'me' },
      apiKey: expect.stringMatching(/^wsk_[A-Za-z0-9_-]{43}$/),
    });
    expect(data.apiKey.startsWith(data.apiKeyPrefix)).toBe(true);

    const [row] = await sql`select api_key_hash, api_key_prefix, created_by from public.websites where id = ${data.id}`;
    expect(row.api_key_hash).toEqual(createHash('sha256').update(data.apiKey).digest());
    expect(row.api_key_prefix).toBe(data.apiKeyPrefix);
    // The legacy admin token has no auth.users row behind it.
    expect(row.created_by).toBeNull();
    const stored = JSON.stringify(await sql`select * from public.websites where id = ${data.id}`);
    expect(stored).not.toContain(data.apiKey);

    const read = await app.inject({ method: 'GET', url: `/api/websites/${data.id}`, headers: auth });
    expect(read.statusCode).toBe(200);
    expect(read.json().data).not.toHaveProperty('apiKey');
  });

  it('GET /api-key/:apiKey: the key is the credential; the answer has no key', async () => {
    const site = await createWebsite(app, 'Keyed');
    const response = await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ success: true, data: { ...WEBSITE, id: site.id, name: 'Keyed' } });
    for (const key of ['wsk_' + 'B'.repeat(43), 'nonsense', site.apiKey.slice(0, -1) + (site.apiKey.endsWith('A') ? 'B' : 'A')]) {
      const unknown = await app.inject({ method: 'GET', url: `/api/websites/api-key/${encodeURIComponent(key)}` });
      expect(unknown.statusCode).toBe(404);
      expect(unknown.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
    }
  });

  it('a key of any other shape is not one of ours: 404 like any wrong key; an empty X-API-Key is no key (401)', async () => {
    const long = 'k'.repeat(300);
    const byPath = await app.inject({ method: 'GET', url: `/api/websites/api-key/${long}` });
    expect(byPath.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
    const byHeader = await app.inject({ method: 'GET', url: '/api/websites/api-key', headers: { 'x-api-key': long } });
    expect(byHeader.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
    const empty = await app.inject({ method: 'GET', url: '/api/websites/api-key', headers: { 'x-api-key': '' } });
    expect(empty.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
  });

  it('an upper-case id names the same website', async () => {
    const site = await createWebsite(app, 'Cased');
    const read = await app.inject({ method: 'GET', url: `/api/websites/${site.id.toUpperCase()}`, headers: auth });
    expect(read.statusCode).toBe(200);
    expect(read.json().data.id).toBe(site.id);
  });

  it('no cache may keep an answer: each read route (the lookup by key has the key in its URL), the key-carrying writes, and refusals', async () => {
    const site = await createWebsite(app, 'Uncached');
    const answers = {
      'GET /': await app.inject({ method: 'GET', url: '/api/websites', headers: auth }),
      'GET /:id': await app.inject({ method: 'GET', url: `/api/websites/${site.id}`, headers: auth }),
      'GET /api-key/:apiKey': await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` }),
      'GET /api-key': await app.inject({ method: 'GET', url: '/api/websites/api-key', headers: { 'x-api-key': site.apiKey } }),
      'GET /api-key/:apiKey, unknown key': await app.inject({ method: 'GET', url: `/api/websites/api-key/wsk_${'B'.repeat(43)}` }),
      'GET /:id, no token': await app.inject({ method: 'GET', url: `/api/websites/${site.id}` }),
      'POST /': await create({ name: 'Uncached too', domain: 'uncached.example.com' }),
      'POST /:id/api-key': await app.inject({ method: 'POST', url: `/api/websites/${site.id}/api-key`, headers: auth }),
    };
    expect(Object.fromEntries(Object.entries(answers).map(([route, answer]) => [route, [answer.statusCode, answer.headers['cache-control']]]))).toEqual({
      'GET /': [200, 'no-store'],
      'GET /:id': [200, 'no-store'],
      'GET /api-key/:apiKey': [200, 'no-store'],
      'GET /api-key': [200, 'no-store'],
      'GET /api-key/:apiKey, unknown key': [404, 'no-store'],
      'GET /:id, no token': [401, 'no-store'],
      'POST /': [201, 'no-store'],
      'POST /:id/api-key': [200, 'no-store'],
    });
  });

  it('POST /:id/api-key replaces the key: the new one works at once, shown once; the old one opens nothing; unknown id → 404', async () => {
    const site = await createWebsite(app, 'Rotated');
    const rotated = await app.inject({ method: 'POST', url: `/api/websites/${site.id}/api-key`, headers: auth });
    expect(rotated.statusCode).toBe(200);
    const { data, message } = rotated.json();
    expect(message).toMatch(/store the new API key now/);
    expect(data).toEqual({ ...WEBSITE, id: site.id, name: 'Rotated', apiKey: expect.stringMatching(/^wsk_[A-Za-z0-9_-]{43}$/) });
    expect(data.apiKey).not.toBe(site.apiKey);
    expect(data.apiKey.startsWith(data.apiKeyPrefix)).toBe(true);

    expect((await app.inject({ method: 'GET', url: `/api/websites/api-key/${data.apiKey}` })).json().data.id).toBe(site.id);
    expect((await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` })).statusCode).toBe(404);
    // Analytics read with the key follows it too.
    const readWith = (apiKey: string) => app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}`, headers: { 'x-api-key': apiKey } });
    expect((await readWith(data.apiKey)).statusCode).toBe(200);
    expect((await readWith(site.apiKey)).statusCode).toBe(401);

    const unknown = await app.inject({ method: 'POST', url: `/api/websites/${randomUUID()}/api-key`, headers: auth });
    expect(unknown.json()).toEqual({ success: false, error: 'Website not found', statusCode: 404 });
    expect((await app.inject({ method: 'POST', url: `/api/websites/${site.id}/api-key` })).statusCode).toBe(401);
  });

  it('GET / lists newest first with pagination', async () => {
    const first = await createWebsite(app, 'Older');
    const second = await createWebsite(app, 'Newer');
    const response = await app.inject({ method: 'GET', url: '/api/websites?limit=100&offset=0', headers: auth });
    expect(response.statusCode).toBe(200);
    const body = response.json();
    const ids = body.data.map((website: { id: string }) => website.id);
    expect(ids.length).toBeLessThan(100);
    expect(body.pagination).toEqual({ limit: 100, offset: 0, total: ids.length });
    expect(ids.indexOf(second.id)).toBeGreaterThanOrEqual(0);
    expect(ids.indexOf(second.id)).toBeLessThan(ids.indexOf(first.id));
    for (const website of body.data) expect(website).not.toHaveProperty('apiKey');
    // Each page of one is the list's row at its offset, and says the same total.
    for (const offset of [0, 1, ids.length - 1]) {
      const page = await app.inject({ method: 'GET', url: `/api/websites?limit=1&offset=${offset}`, headers: auth });
      expect(page.json().data.map((website: { id: string }) => website.id), `offset ${offset}`).toEqual([ids[offset]]);
      expect(page.json().pagination, `offset ${offset}`).toEqual({ limit: 1, offset, total: ids.length });
    }
    const beyond = await app.inject({ method: 'GET', url: `/api/websites?limit=1&offset=${ids.length}`, headers: auth });
    expect(beyond.json().data).toEqual([]);
    const bad = await app.inject({ method: 'GET', url: '/api/websites?limit=0', headers: auth });
    expect(bad.json()).toMatchObject({ statusCode: 400, details: { limit: ['Limit must be an integer from 1 to 100'] } });
    // Decimal digits only: what Number() would read as something else is refused, not guessed at.
    for (const limit of ['1e1', '0x10', '%205', '5.0', '%2B5', '-0']) {
      const refused = await app.inject({ method: 'GET', url: `/api/websites?limit=${limit}&offset=1e1`, headers: auth });
      expect(refused.json(), limit).toMatchObject({
        statusCode: 400,
        details: { limit: ['Limit must be an integer from 1 to 100'], offset: ['Offset must be a non-negative integer'] },
      });
    }
    expect((await app.inject({ method: 'GET', url: '/api/websites?limit=007&offset=00', headers: auth })).json().pagination).toMatchObject({ limit: 7, offset: 0 });
    // A key given no value is not given: the defaults, as a front end's "All" option sends.
    for (const query of ['limit=&offset=', 'limit=&limit=&offset=']) {
      const empty = await app.inject({ method: 'GET', url: `/api/websites?${query}`, headers: auth });
      expect(empty.statusCode, query).toBe(200);
      expect(empty.json().pagination, query).toMatchObject({ limit: 20, offset: 0 });
    }
    const repeated = await app.inject({ method: 'GET', url: '/api/websites?limit=&limit=1', headers: auth });
    expect(repeated.json().pagination).toMatchObject({ limit: 1 });
    // Two values for one key are refused as that, not as a value each of them is not.
    const twice = await app.inject({ method: 'GET', url: '/api/websites?limit=1&limit=2&offset=3&offset=x&offset=5', headers: auth });
    expect(twice.json()).toEqual({
      success: false,
      error: 'Validation failed',
      statusCode: 400,
      details: { limit: ['limit must be given once, not 2 times'], offset: ['offset must be given once, not 3 times'] },
    });
  });

  it('PUT /:id updates the given fields; unknown id → 404', async () => {
    const site = await createWebsite(app, 'Before');
    const response = await app.inject({ method: 'PUT', url: `/api/websites/${site.id}`, headers: auth, payload: { name: 'After', settings: { a: 1 } } });
    expect(response.statusCode).toBe(200);
    expect(response.json().data).toMatchObject({ id: site.id, name: 'After', settings: { a: 1 } });
    const missing = await app.inject({ method: 'PUT', url: `/api/websites/${randomUUID()}`, headers: auth, payload: { name: 'X' } });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error).toBe('Website not found');
    const empty = await app.inject({ method: 'PUT', url: `/api/websites/${site.id}`, headers: auth, payload: {} });
    expect(empty.statusCode).toBe(400);
  });

  it('DELETE /:id removes the website and its events', async () => {
    const site = await createWebsite(app, 'Short-lived');
    const recorded = await app.inject({
      method: 'POST',
      url: '/api/analytics',
      payload: { websiteId: site.id, eventType: 'page_view', page: '/', userAgent: 'Mozilla/5.0 (X11; Linux x86_64) Firefox/128.0', sessionId: 's' },
    });
    expect(recorded.statusCode).toBe(201);
    const response = await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
    expect(response.statusCode).toBe(200);
    expect(response.json()).toEqual({ success: true, message: 'Website deleted' });
    expect(await sql`select 1 from public.analytics_events where website_id = ${site.id}`).toHaveLength(0);
    expect((await app.inject({ method: 'GET', url: `/api/websites/${site.id}`, headers: auth })).statusCode).toBe(404);
    expect((await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth })).statusCode).toBe(404);
    // Its key is gone too.
    expect((await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` })).statusCode).toBe(404);
  });

  it.each([
    ['name missing', { domain: 'a.test' }, 'name', 'Name is required'],
    ['name too long', { name: 'n'.repeat(201), domain: 'a.test' }, 'name', 'Name must be at most 200 characters'],
    ['domain not a host', { name: 'A', domain: 'https://a.test/x' }, 'domain', 'Domain must be a host name such as example.com'],
    ['settings an array', { name: 'A', domain: 'a.test', settings: [] }, 'settings', 'Settings must be a JSON object'],
    ['a settings key over 100 characters', { name: 'A', domain: 'a.test', settings: { ['k'.repeat(101)]: 1 } }, 'settings', 'Settings keys must be at most 100 characters'],
    ['a port over 65535', { name: 'A', domain: 'a.com:99999' }, 'domain', 'Domain port must be from 1 to 65535'],
    ['port 0', { name: 'A', domain: 'a.com:0' }, 'domain', 'Domain port must be from 1 to 65535'],
    // The table holds 253 characters, port included: a longest host name with a port was 400 `Invalid value`, without details.
    ['a 253-character host with a port', { name: 'A', domain: `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}:8080` }, 'domain', 'Domain must be at most 253 characters'],
    ['name an array', { name: ['a'], domain: 'a.test' }, 'name', 'Name must be a string'],
  ])('POST with %s → 400', async (_label, payload, field, message) => {
    const response = await create(payload);
    expect(response.statusCode).toBe(400);
    expect(response.json()).toMatchObject({ error: 'Validation failed', details: { [field]: [message] } });
  });

  it("settings and metadata each as full as their 16 KiB allow pass the body's limit on values, and the table's bound", async () => {
    // 8,180 zeros are 16,367 bytes as JSON: over 16,000 values in the body, under its 20,000.
    // Stored, about 96 KiB each, the most the API writes against the table's 1 MiB (20261129100300).
    const full = { zeros: Array<number>(8_180).fill(0) };
    expect(Buffer.byteLength(JSON.stringify(full))).toBeLessThanOrEqual(16 * 1024);
    const response = await create({ name: 'Full', domain: 'full.example.test', settings: full, metadata: full });
    expect(response.statusCode, response.body).toBe(201);
    expect(response.json().data).toMatchObject({ settings: full, metadata: full });
  });

  it('POST with a number JSON reads as Infinity (1e400) → 400, not stored as null', async () => {
    const response = await app.inject({
      method: 'POST',
      url: '/api/websites',
      headers: { ...auth, 'content-type': 'application/json' },
      payload: '{"name":"A","domain":"a.test","metadata":{"x":1e400}}',
    });
    expect(response.statusCode).toBe(400);
    expect(response.json().details).toEqual({ metadata: ['Metadata must not contain numbers too large to store (such as 1e400)'] });
    expect((await create({ name: 'Ported', domain: 'a.com:65535' })).statusCode).toBe(201);
  });

  it('a malformed id → 400; no token or a bad one → 401', async () => {
    expect((await app.inject({ method: 'GET', url: '/api/websites/not-a-uuid', headers: auth })).statusCode).toBe(400);
    for (const [method, url] of [
      ['GET', '/api/websites'],
      ['GET', `/api/websites/${randomUUID()}`],
      ['POST', '/api/websites'],
      ['PUT', `/api/websites/${randomUUID()}`],
      ['DELETE', `/api/websites/${randomUUID()}`],
    ] as const) {
      for (const headers of [{}, { authorization: 'Bearer garbage' }]) {
        const response = await app.inject({ method, url, headers, payload: method === 'GET' || method === 'DELETE' ? undefined : { name: 'A', domain: 'a.test' } });
        expect(response.statusCode, `${method} ${url}`).toBe(401);
        expect(response.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
      }
    }
  });
});

describe('row-level security on websites, as each role', () => {
  const insertAs = (userId: string, name: string) =>
    asUser(sql, userId, (tx) => tx`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix, created_by)
      values (${name}, 'rls.example.test', ${createHash('sha256').update(randomUUID()).digest()}, 'wsk_rls', ${userId})
      returning id`);

  async function existingWebsite() {
    const [row] = await sql`
      insert into public.websites (name, domain, api_key_hash, api_key_prefix)
      values ('Existing', 'rls.example.test', ${createHash('sha256').update(randomUUID()).digest()}, 'wsk_rls') returning id`;
    return row.id as string;
  }

  async function userWith(role?: 'viewer' | 'editor' | 'admin') {
    const user = await createAuthUser(sql);
    if (role) await grantRole(sql, user.id, role);
    return user.id;
  }

  it('viewer: reads, but neither creates, updates nor deletes', async () => {
    const viewer = await userWith('viewer');
    const id = await existingWebsite();
    expect(await asUser(sql, viewer, (tx) => tx`select id from public.websites where id = ${id}`)).toHaveLength(1);
    await expect(insertAs(viewer, 'By viewer')).rejects.toMatchObject({ code: '42501' });
    expect(await asUser(sql, viewer, (tx) => tx`update public.websites set name = 'X' where id = ${id} returning id`)).toHaveLength(0);
    expect(await asUser(sql, viewer, (tx) => tx`update public.websites set api_key_prefix = 'wsk_x' where id = ${id} returning id`)).toHaveLength(0);
    expect(await asUser(sql, viewer, (tx) => tx`delete from public.websites where id = ${id} returning id`)).toHaveLength(0);
  });

  it('editor: creates and updates, but does not delete', async () => {
    const editor = await userWith('editor');
    const id = await existingWebsite();
    expect(await insertAs(editor, 'By editor')).toHaveLength(1);
    expect(await asUser(sql, editor, (tx) => tx`update public.websites set name = 'Edited' where id = ${id} returning id`)).toHaveLength(1);
    // Rotating the key writes its hash and prefix; the deletion mark stays begin_website_deletion's alone.
    const newHash = createHash('sha256').update(randomUUID()).digest();
    expect(await asUser(sql, editor, (tx) => tx`update public.websites set api_key_hash = ${newHash}, api_key_prefix = 'wsk_new' where id = ${id} returning id`)).toHaveLength(1);
    await expect(asUser(sql, editor, (tx) => tx`update public.websites set deletion_started_at = now() where id = ${id}`)).rejects.toMatchObject({ code: '42501' });
    // What the API bounds, the table bounds too, for a write in SQL: no 2 MB of settings, no long prefix, no hash but a SHA-256.
    await expect(asUser(sql, editor, (tx) => tx`update public.websites set settings = jsonb_build_object('x', repeat('A', 2000000)) where id = ${id}`)).rejects.toMatchObject({ code: '23514' });
    await expect(asUser(sql, editor, (tx) => tx`update public.websites set metadata = jsonb_build_object('x', repeat('A', 2000000)) where id = ${id}`)).rejects.toMatchObject({ code: '23514' });
    await expect(asUser(sql, editor, (tx) => tx`update public.websites set api_key_prefix = repeat('p', 33) where id = ${id}`)).rejects.toMatchObject({ code: '23514' });
    await expect(asUser(sql, editor, (tx) => tx`update public.websites set api_key_hash = decode('00', 'hex') where id = ${id}`)).rejects.toMatchObject({ code: '23514' });
    // A website being deleted stays keyless: not even an UPDATE that reads no
    // column (no WHERE, so no SELECT policy) reaches it. All of it is rolled back.
    const markedPrefix = await asUser(sql, editor, async (tx) => {
      await tx`reset role`;
      const [marked] = await tx`
        insert into public.websites (name, domain, api_key_hash, api_key_prefix, deletion_started_at)
        values ('Marked', 'rls.example.test', ${createHash('sha256').update(randomUUID()).digest()}, 'wsk_marked', now()) returning id`;
      await tx`set local role authenticated`;
      await tx`update public.websites set api_key_prefix = 'wsk_rekeyed'`;
      await tx`reset role`;
      const [row] = await tx`select api_key_prefix from public.websites where id = ${marked.id}`;
      return row.api_key_prefix;
    });
    expect(markedPrefix).toBe('wsk_marked');
    expect(await asUser(sql, editor, (tx) => tx`delete from public.websites where id = ${id} returning id`)).toHaveLength(0);
  });

  it('admin: deletes', async () => {
    const admin = await userWith('admin');
    const id = await existingWebsite();
    expect(await asUser(sql, admin, (tx) => tx`delete from public.websites where id = ${id} returning id`)).toHaveLength(1);
  });

  it('a user without a role sees no website; anon may not ask', async () => {
    const nobody = await userWith();
    const id = await existingWebsite();
    expect(await asUser(sql, nobody, (tx) => tx`select id from public.websites where id = ${id}`)).toHaveLength(0);
    await expect(insertAs(nobody, 'By nobody')).rejects.toMatchObject({ code: '42501' });
    await expect(asUser(sql, null, (tx) => tx`select id from public.websites`)).rejects.toMatchObject({ code: '42501' });
  });
});

describe('deleting a website with many events', () => {
  let app: FastifyInstance;
  beforeAll(async () => {
    app = await buildTestApp();
  });
  afterAll(async () => app?.close());
  const rowsLeft = async (websiteId: string) => {
    const left: Record<string, number> = {};
    for (const table of ['websites', ...ANALYTICS_TABLES]) {
      const [row] = await sql`select count(*)::int as n from ${sql(`public.${table}`)} where ${sql(table === 'websites' ? 'id' : 'website_id')} = ${websiteId}`;
      if (row.n > 0) left[table] = row.n;
    }
    return left;
  };
  const insertManyEvents = (websiteId: string, count: number) => insertEventsInBulk(sql, websiteId, count);

  // 7–11 s on a slow machine of this kind (the 80,000 events and their rollups, then some 1,200 batches): the time is not under test.
  it('completes where one statement would outlast the statement timeout; its events and rollups go with it', { timeout: 120_000 }, async () => {
    // 60 ms: about half of what deleting 80 000 events and their rollups in one statement takes
    // here (108–222 ms), and many times what one batch of 200 rows takes (1.5 ms median, 4 ms with
    // the machine's cores busy; before batches walked the index they grew to 20 ms and more).
    // The longest wait: the request answers once every row is gone, as a small website's does by default.
    const strict = await buildTestApp({ DATABASE_STATEMENT_TIMEOUT_MS: '60', WEBSITE_DELETE_BATCH: '200', WEBSITE_DELETE_WAIT_MS: '60000' });
    const site = await createWebsite(strict, 'Many events');
    try {
      await insertManyEvents(site.id, 80_000);
      expect(Object.keys(await rowsLeft(site.id)).sort()).toEqual(['websites', ...ANALYTICS_TABLES].sort());
      const auth = { authorization: `Bearer ${await adminToken()}` };
      const response = await strict.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
      expect(response.statusCode, response.body).toBe(200);
      expect(response.json()).toEqual({ success: true, message: 'Website deleted' });
      expect(await rowsLeft(site.id)).toEqual({});
      expect((await strict.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` })).statusCode).toBe(404);
    } finally {
      await strict.close();
      await sql`delete from public.websites where id = ${site.id}`;
    }
  });

  it('two deleters of one website take turns: each batch deletes events while events are left, never the rollups before them or the website whole', async () => {
    const site = await createWebsite(app, 'Two deleters');
    try {
      await insertManyEvents(site.id, 3_000);
      await sql`update public.websites set deletion_started_at = now() where id = ${site.id}`;
      const rollupsBefore = await rowsLeft(site.id);
      for (let round = 1; round <= 3; round += 1) {
        const first = await openTransaction(sql, (tx) => tx<{ deleted: number }[]>`select public.delete_website_batch(${site.id}, 100) as deleted`);
        expect(first.result[0].deleted).toBe(100);
        // The second call comes while the first holds its batch uncommitted (the same first rows are the ones it would pick).
        const second = sql<{ deleted: number }[]>`select public.delete_website_batch(${site.id}, 100) as deleted`.execute();
        expect(await untilWaitingOnLock(sql, 'delete_website_batch')).toBe(true);
        await first.commit();
        expect((await second)[0].deleted).toBe(100);
        expect(await rowsLeft(site.id)).toEqual({ ...rollupsBefore, analytics_events: 3_000 - round * 200 });
      }
    } finally {
      await sql`delete from public.websites where id = ${site.id}`;
    }
  });

  it("unlinks its feedback in batches too, so the website row's own cascade finds none: the feedback stays, with no website and its counts moved", async () => {
    const site = await createWebsite(app, 'Much feedback');
    try {
      await insertManyEvents(site.id, 4);
      const ids = (
        await sql<{ id: string }[]>`
          insert into public.feedback (name, email, comment, rating, status, resolved_at, website_id)
          select 'Ann', 'ann@example.test', 'Feedback number ' || g, 4, (array['pending', 'resolved'])[1 + g % 2]::public.feedback_status,
                 case when g % 2 = 1 then now() end, ${site.id}
            from generate_series(1, 7) g
          returning id`
      ).map((row) => row.id);
      await sql`update public.websites set deletion_started_at = now() where id = ${site.id}`;
      const feedbackLinked = async () => (await sql`select count(*)::int as n from public.feedback where website_id = ${site.id}`)[0].n as number;
      const calls: { deleted: number; feedbackLinkedAfter: number }[] = [];
      for (;;) {
        const [{ deleted }] = await sql<{ deleted: number }[]>`select public.delete_website_batch(${site.id}, 3) as deleted`;
        if (deleted === 0) break;
        calls.push({ deleted, feedbackLinkedAfter: await feedbackLinked() });
      }
      // Events and rollups first (their batches leave the feedback alone), then the feedback three at a
      // time, and at last the website row, when none is left for its cascade.
      const feedbackCalls = calls.filter((call, index) => call.feedbackLinkedAfter < (calls[index - 1]?.feedbackLinkedAfter ?? 7));
      expect(feedbackCalls).toEqual([
        { deleted: 3, feedbackLinkedAfter: 4 },
        { deleted: 3, feedbackLinkedAfter: 1 },
        { deleted: 1, feedbackLinkedAfter: 0 },
      ]);
      expect(calls.at(-1)).toEqual({ deleted: 1, feedbackLinkedAfter: 0 });
      expect(calls.at(-2)).toEqual({ deleted: 1, feedbackLinkedAfter: 0 });
      expect(await rowsLeft(site.id)).toEqual({});
      const kept = await sql`select count(*)::int as n from public.feedback where id = any(${ids}::uuid[]) and website_id is null`;
      expect(kept[0].n).toBe(7);
      const counted = await sql`
        select coalesce(sum(total), 0)::int as n from (
          select total from public.feedback_counts where website_id = ${site.id}
          union all select delta from public.feedback_count_changes where website_id = ${site.id}) c`;
      expect(counted[0].n).toBe(0);
    } finally {
      await sql`delete from public.feedback where comment like 'Feedback number %' and email = 'ann@example.test'`;
      await sql`delete from public.websites where id = ${site.id}`;
    }
  });

  it('unlinks feedback an admin triages meanwhile in the same batch, not leaving it to the cascade', async () => {
    const site = await createWebsite(app, 'Triaged while deleted');
    try {
      await sql`
        insert into public.feedback (name, email, comment, rating, website_id)
        select 'Ann', 'ann@example.test', 'Triaged during the deletion ' || g, 4, ${site.id} from generate_series(1, 3) g`;
      await sql`update public.websites set deletion_started_at = now() where id = ${site.id}`;
      // The admin's triage holds the rows when the batch reads them, and gives each a new version.
      const triage = await openTransaction(sql, (tx) => tx`update public.feedback set admin_notes = 'seen' where website_id = ${site.id}`);
      const batch = sql<{ deleted: number }[]>`select public.delete_website_batch(${site.id}, 3) as deleted`.execute();
      expect(await untilWaitingOnLock(sql, 'delete_website_batch')).toBe(true);
      await triage.commit();
      // All three unlinked by this batch; the website row is left for the next call.
      expect((await batch)[0].deleted).toBe(3);
      const rows = await sql`select admin_notes, website_id from public.feedback where comment like 'Triaged during the deletion %'`;
      expect(rows).toEqual(Array.from({ length: 3 }, () => ({ admin_notes: 'seen', website_id: null })));
      expect(await rowsLeft(site.id)).toEqual({ websites: 1 });
    } finally {
      await sql`delete from public.feedback where comment like 'Triaged during the deletion %'`;
      await sql`delete from public.websites where id = ${site.id}`;
    }
  });

  // Counted, not timed: a batch that finds its rows with a bitmap scan reads
  // every index entry the website still has; one with a sequential scan, every
  // page earlier batches emptied. Either makes a deletion take time in the
  // square of the website's rows (docs/analytics.md, "Deleting a website").
  it('each batch reads the index entries of its own rows and of rows deleted before it, never the rows left, and no table from its start', { timeout: 120_000 }, async () => {
    const site = await createWebsite(app, 'Counted batches');
    const batchSize = 200;
    try {
      await insertManyEvents(site.id, 40_000);
      await sql`update public.websites set deletion_started_at = now() where id = ${site.id}`;
      // Batches go through the tables in this order, each until it is empty.
      const left = await rowsLeft(site.id);
      const deletedBefore = new Map<string, number>();
      let batches = 0;
      for (;;) {
        const { result: deleted, reads } = await sql.begin((tx) =>
          readsDuring(tx, ANALYTICS_TABLES, async () => {
            const [row] = await tx<{ deleted: number }[]>`select public.delete_website_batch(${site.id}, ${batchSize}) as deleted`;
            return row.deleted;
          }),
        );
        if (deleted === 0) break;
        batches += 1;
        const from = ANALYTICS_TABLES.find((table) => (left[table] ?? 0) > 0) ?? 'websites';
        expect(deleted, `batch ${batches}: ${from}`).toBe(Math.min(batchSize, left[from]));
        expect(reads.map((read) => read.table).sort()).toEqual([...ANALYTICS_TABLES].sort());
        // The last batch deletes the website, and the cascade plans as any statement does.
        for (const read of from === 'websites' ? [] : reads) {
          expect(read.seqScans, `batch ${batches}: ${read.table}`).toBe(0);
          expect(read.indexEntries, `batch ${batches}: ${read.table}`).toBeLessThanOrEqual((deletedBefore.get(read.table) ?? 0) + batchSize);
        }
        left[from] -= deleted;
        deletedBefore.set(from, (deletedBefore.get(from) ?? 0) + deleted);
      }
      expect(batches).toBeGreaterThan(40_000 / batchSize);
      expect(await rowsLeft(site.id)).toEqual({});
    } finally {
      await sql`delete from public.websites where id = ${site.id}`;
    }
  });

  it.each([
    ['the statement timeout', { DATABASE_STATEMENT_TIMEOUT_MS: '200' }],
    // As by default (5 s each): the pool's deadline starts first, so it is what ends the batch.
    ["the pool's deadline (as long as the statement timeout)", { DATABASE_STATEMENT_TIMEOUT_MS: '200', DATABASE_ACQUIRE_TIMEOUT_MS: '200' }],
  ])('a batch that a lock holds past %s is tried again, smaller, and the deletion completes', async (_deadline, settings) => {
    const strict = await buildTestApp({ ...settings, WEBSITE_DELETE_BATCH: '200' });
    const site = await createWebsite(strict, 'Held up');
    try {
      await insertManyEvents(site.id, 500);
      const auth = { authorization: `Bearer ${await adminToken()}` };
      // Another transaction holds every event of the site for 500 ms: the first
      // batches wait out their 200 ms and are cancelled; one after the lock goes succeeds.
      let locked!: () => void;
      const lockTaken = new Promise<void>((resolve) => (locked = resolve));
      const holder = sql.begin(async (tx) => {
        await tx`select 1 from public.analytics_events where website_id = ${site.id} for update`;
        locked();
        await new Promise((resolve) => setTimeout(resolve, 500));
      });
      await lockTaken;
      const response = await strict.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
      await holder;
      expect(response.statusCode, response.body).toBe(200);
      expect(await rowsLeft(site.id)).toEqual({});
    } finally {
      await strict.close();
      await sql`delete from public.websites where id = ${site.id}`;
    }
  });

  it('finishing the deletions left behind goes on past one whose rows stay held, then says that one failed', async () => {
    const strict = await buildTestApp({ DATABASE_STATEMENT_TIMEOUT_MS: '200', WEBSITE_DELETE_BATCH: '200' });
    const held = await createWebsite(strict, 'Held for good');
    const free = await createWebsite(strict, 'Free to go');
    try {
      await insertManyEvents(held.id, 300);
      await insertManyEvents(free.id, 300);
      // Marked as a stopped process leaves them, the held one begun first, so it is taken first.
      await sql`update public.websites set deletion_started_at = now() - interval '1 minute' where id = ${held.id}`;
      await sql`update public.websites set deletion_started_at = now() where id = ${free.id}`;
      let release!: () => void;
      const released = new Promise<void>((resolve) => (release = resolve));
      let locked!: () => void;
      const lockTaken = new Promise<void>((resolve) => (locked = resolve));
      const holder = sql.begin(async (tx) => {
        await tx`select 1 from public.analytics_events where website_id = ${held.id} for update`;
        locked();
        await released;
      });
      await lockTaken;
      try {
        const finishing = createWebsitesService({ db: strict.db, deleteBatchSize: 200, log: strict.log }).finishLeftDeletionsElevated();
        await expect(finishing).rejects.toThrow(/website deletions failed/);
      } finally {
        release();
        await holder;
      }
      expect(await rowsLeft(free.id)).toEqual({});
      expect((await rowsLeft(held.id)).analytics_events).toBe(300);
    } finally {
      await strict.close();
      await sql`delete from public.websites where id in ${sql([held.id, free.id])}`;
    }
  });

  it('a deletion cut short leaves a website that is hidden and keyless, and is finished later', async () => {
    const site = await createWebsite(app, 'Cut short');
    const other = await createWebsite(app, 'Cut short too');
    try {
      await insertManyEvents(site.id, 2_000);
      await insertManyEvents(other.id, 2_000);
      const admin = await createAuthUser(sql);
      await grantRole(sql, admin.id, 'admin');
      const editor = await createAuthUser(sql);
      await grantRole(sql, editor.id, 'editor');
      // Only admins begin a deletion, as only admins delete.
      await expect(asUser(sql, editor.id, (tx) => tx`select public.begin_website_deletion(${site.id})`)).rejects.toMatchObject({ code: '42501' });
      // The first step alone, as a process that stopped right after it would leave it
      // (committed as the admin; asUser rolls back).
      for (const id of [site.id, other.id]) {
        await sql.begin(async (tx) => {
          await tx`select set_config('role', 'authenticated', true), set_config('request.jwt.claims', ${JSON.stringify({ sub: admin.id, role: 'authenticated' })}, true)`;
          expect(await tx`select public.begin_website_deletion(${id}) as begun`).toEqual([{ begun: true }]);
        });
      }

      const auth = { authorization: `Bearer ${await adminToken()}` };
      expect((await app.inject({ method: 'GET', url: `/api/websites/${site.id}`, headers: auth })).statusCode).toBe(404);
      const listed = await app.inject({ method: 'GET', url: '/api/websites?limit=100', headers: auth });
      expect(listed.json().data.map((website: { id: string }) => website.id)).not.toContain(site.id);
      expect((await app.inject({ method: 'PUT', url: `/api/websites/${site.id}`, headers: auth, payload: { name: 'Back' } })).statusCode).toBe(404);
      expect((await app.inject({ method: 'GET', url: `/api/websites/api-key/${site.apiKey}` })).statusCode).toBe(404);
      const byKey = await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}`, headers: { 'x-api-key': site.apiKey } });
      expect(byKey.statusCode).toBe(401);
      // Nor does the legacy admin token (the service role, which row-level security lets through) read it,
      // and ingestion, which names the website by id alone, stores nothing more for it.
      expect((await app.inject({ method: 'GET', url: `/api/analytics?websiteId=${site.id}`, headers: auth })).statusCode).toBe(404);
      const live = await app.inject({ method: 'GET', url: '/api/analytics/realtime', headers: auth });
      expect(live.json().data.websites.map((website: { websiteId: string }) => website.websiteId)).not.toContain(site.id);
      const event = { websiteId: site.id, eventType: 'page_view', page: '/', userAgent: 'Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0', sessionId: 's-late' };
      expect((await app.inject({ method: 'POST', url: '/api/analytics', payload: event })).statusCode).toBe(404);
      expect(await asUser(sql, admin.id, (tx) => tx`select id from public.websites where id = ${site.id}`)).toHaveLength(0);
      expect((await rowsLeft(site.id)).analytics_events).toBe(2_000);

      // Asked again, DELETE finishes it; at start-up, the server finishes what is left.
      const again = await app.inject({ method: 'DELETE', url: `/api/websites/${site.id}`, headers: auth });
      expect(again.statusCode).toBe(200);
      expect(await rowsLeft(site.id)).toEqual({});
      await createWebsitesService({ db: app.db, deleteBatchSize: 500, log: app.log }).finishLeftDeletionsElevated();
      expect(await rowsLeft(other.id)).toEqual({});
    } finally {
      await sql`delete from public.websites where id in ${sql([site.id, other.id])}`;
    }
  });
});
