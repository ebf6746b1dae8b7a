import { createHash, randomBytes, randomUUID } from 'node:crypto';
import type postgres from 'postgres';

// Rows and bodies the feedback tests make for themselves.

export function feedbackBody(overrides: Record<string, unknown> = {}) {
  return {
    name: 'Grace Hopper',
    email: `grace-${randomUUID().slice(0, 8)}@example.test`,
    comment: 'The contact form loses my text when I go back.',
    rating: 4,
    ...overrides,
  };
}

/** A website row of this test's own, to link feedback to and filter by. */
export async function createWebsite(sql: postgres.Sql, name = 'Test site'): Promise<string> {
  const apiKey = randomBytes(24).toString('hex');
  const [row] = await sql<{ id: string }[]>`
    insert into public.websites (name, domain, api_key_hash, api_key_prefix)
    values (${name}, ${`${randomUUID().slice(0, 8)}.example.test`},
            ${createHash('sha256').update(apiKey).digest()}, ${apiKey.slice(0, 8)})
    returning id`;
  return row.id;
}

/** A base64 PNG data URL of `bytes` bytes (at least 8): a PNG file's signature, then filler. */
/** `count` feedback rows (and so `count` notifications, due at once), inserted in one statement; their ids. */
export async function insertFeedbackRows(sql: postgres.Sql, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, () => randomUUID());
  await sql`
    insert into public.feedback (id, name, email, comment, rating)
    select id, 'Outbox Person', 'outbox@example.test', 'Feedback for the outbox worker tests', 4
      from unnest(${ids}::uuid[]) as id`;
  return ids;
}

export function pngDataUrl(bytes: number): string {
  const signature = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  return `data:image/png;base64,${Buffer.concat([signature, Buffer.alloc(Math.max(0, bytes - signature.length), 7)]).toString('base64')}`;
}

/** Polls `check` until it returns a value other than undefined/false. */
export async function waitFor<T>(check: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs = 10_000, label = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value as T;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${label}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

export const ISO_MS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
