import { createHash, createHmac } from 'node:crypto';
import { describe, expect, it, vi } from 'vitest';
import { addDays, daysInRange, isCalendarDay } from '../src/modules/analytics/dates.ts';
import { canonicalPath, createVisitorIds, describeUserAgent, referrerHost, storedReferrer } from '../src/modules/analytics/enrich.ts';
import { createGroupCommit, EARLY_BATCH_ROWS, QueueFullError, QueueTimeoutError } from '../src/modules/analytics/group-commit.ts';
import { uuidv7 } from '../src/modules/analytics/ids.ts';

// Pure parts of analytics: group commit with a stand-in writer, the facts
// derived from a request, days and ids.

const tick = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('group commit', () => {
  function recorder(options: { maxRows?: number; maxWaitMs?: number; maxInFlight?: number; queueMax?: number; fail?: (items: number[]) => boolean }) {
    const batches: number[][] = [];
    const commit = createGroupCommit<number, string>({
      maxRows: options.maxRows ?? 100,
      maxWaitMs: options.maxWaitMs ?? 5,
      maxInFlight: options.maxInFlight ?? 1,
      queueMax: options.queueMax ?? 10_000,
      async write(items) {
        batches.push(items);
        await tick(2);
        if (options.fail?.(items)) throw new Error('batch failed');
        return items.map((item) => `ok:${item}`);
      },
    });
    return { commit, batches };
  }

  it('items arriving together share one batch, written after the wait', async () => {
    const { commit, batches } = recorder({ maxWaitMs: 20 });
    const results = await Promise.all([1, 2, 3].map((item) => commit.add(item)));
    expect(results).toEqual(['ok:1', 'ok:2', 'ok:3']);
    expect(batches).toEqual([[1, 2, 3]]);
  });

  it('a full batch is written at once, without waiting', async () => {
    const { commit, batches } = recorder({ maxRows: 2, maxWaitMs: 10_000, maxInFlight: 5 });
    const started = Date.now();
    await Promise.all([1, 2, 3, 4].map((item) => commit.add(item)));
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(batches).toEqual([
      [1, 2],
      [3, 4],
    ]);
  });

  it('items arriving while a batch is written form the next batch', async () => {
    const { commit, batches } = recorder({ maxRows: 100, maxWaitMs: 1, maxInFlight: 1 });
    const first = commit.add(1);
    await tick(3);
    const rest = [2, 3, 4].map((item) => commit.add(item));
    await Promise.all([first, ...rest]);
    expect(batches.flat()).toEqual([1, 2, 3, 4]);
    expect(batches.length).toBeLessThanOrEqual(3);
  });

  it('items queued while a batch is written still wait for companions, not only for that write', async () => {
    const started: { items: number[]; at: number }[] = [];
    let releaseFirst: () => void = () => {};
    const commit = createGroupCommit<number, string>({
      maxRows: 100,
      maxWaitMs: 60,
      maxInFlight: 1,
      queueMax: 100,
      async write(items) {
        started.push({ items, at: performance.now() });
        if (items[0] === 1) await new Promise<void>((resolve) => (releaseFirst = resolve));
        return items.map((item) => `ok:${item}`);
      },
    });
    const first = commit.add(1);
    await tick(80);
    const queuedAt = performance.now();
    const second = commit.add(2);
    // The write ends long before item 2 has waited 60 ms; item 3 comes after that end.
    releaseFirst();
    await first;
    const third = commit.add(3);
    await expect(Promise.all([second, third])).resolves.toEqual(['ok:2', 'ok:3']);
    expect(started.map((batch) => batch.items)).toEqual([[1], [2, 3]]);
    expect(started[1].at - queuedAt).toBeGreaterThanOrEqual(55);
  });

  it('a batch starts before its wait is out once every item in hand is queued, and not before', async () => {
    let inHand = EARLY_BATCH_ROWS + 1;
    const started: number[][] = [];
    const commit = createGroupCommit<number, string>({
      maxRows: 500,
      maxWaitMs: 60_000,
      maxInFlight: 1,
      queueMax: 1_000,
      itemsInHand: () => inHand,
      async write(items) {
        started.push(items);
        return items.map((item) => `ok:${item}`);
      },
    });
    const items = Array.from({ length: EARLY_BATCH_ROWS }, (_, index) => index);
    const waiting = items.map((item) => commit.add(item));
    await tick(30);
    // One more item is on its way: the batch waits for it.
    expect(started).toEqual([]);
    const last = commit.add(EARLY_BATCH_ROWS);
    await expect(Promise.all([...waiting, last])).resolves.toHaveLength(EARLY_BATCH_ROWS + 1);
    expect(started).toEqual([[...items, EARLY_BATCH_ROWS]]);

    // Fewer than EARLY_BATCH_ROWS, all in hand: the wait gathers companions.
    inHand = 3;
    const few = [1, 2, 3].map((item) => commit.add(item));
    await tick(30);
    expect(started).toHaveLength(1);
    await commit.drain();
    await expect(Promise.all(few)).resolves.toEqual(['ok:1', 'ok:2', 'ok:3']);
  });

  it('a failed batch rejects exactly its own items', async () => {
    const { commit, batches } = recorder({ maxRows: 3, maxInFlight: 3, fail: (items) => items.includes(2) });
    const outcomes = await Promise.allSettled([1, 2, 3, 4, 5, 6].map((item) => commit.add(item)));
    expect(batches).toEqual([
      [1, 2, 3],
      [4, 5, 6],
    ]);
    expect(outcomes.map((outcome) => outcome.status)).toEqual(['rejected', 'rejected', 'rejected', 'fulfilled', 'fulfilled', 'fulfilled']);
  });

  it('refuses items beyond queueMax', async () => {
    const { commit } = recorder({ maxWaitMs: 50, queueMax: 2 });
    const accepted = [commit.add(1), commit.add(2)];
    await expect(commit.add(3)).rejects.toBeInstanceOf(QueueFullError);
    await Promise.all(accepted);
  });

  it('refuses items no batch has taken within maxQueueWaitMs, and never writes them', async () => {
    const written: number[][] = [];
    let release: () => void = () => {};
    const commit = createGroupCommit<number, string>({
      maxRows: 1,
      maxWaitMs: 1,
      maxInFlight: 1,
      queueMax: 100,
      maxQueueWaitMs: 100,
      async write(items) {
        written.push(items);
        // The one slot is held by a slow write (a stuck connection, say).
        if (items[0] === 1) await new Promise<void>((resolve) => (release = resolve));
        return items.map((item) => `ok:${item}`);
      },
    });
    const slow = commit.add(1);
    await tick(10);
    const started = Date.now();
    const waiting = [commit.add(2), commit.add(3)];
    for (const item of waiting) await expect(item).rejects.toBeInstanceOf(QueueTimeoutError);
    expect(Date.now() - started).toBeLessThan(1_000);
    release();
    await expect(slow).resolves.toBe('ok:1');
    await expect(commit.add(4)).resolves.toBe('ok:4');
    expect(written).toEqual([[1], [4]]);
  });

  it('drain writes everything queued at once, then refuses new items', async () => {
    const { commit, batches } = recorder({ maxWaitMs: 60_000 });
    const pending = [1, 2, 3].map((item) => commit.add(item));
    await commit.drain();
    await expect(Promise.all(pending)).resolves.toEqual(['ok:1', 'ok:2', 'ok:3']);
    expect(batches).toEqual([[1, 2, 3]]);
    await expect(commit.add(4)).rejects.toThrow('no longer accepting');
  });
});

describe('facts derived from a request', () => {
  it.each([
    ['https://www.Google.com/search?q=1', 'google.com'],
    ['https://news.ycombinator.com/item?id=1', 'news.ycombinator.com'],
    ['http://www2.example.org', 'www2.example.org'],
    ['android-app://com.slack/', 'com.slack'],
    ['not a url', null],
    ['', null],
    [undefined, null],
  ])('referrer %s → host %s', (referrer, host) => {
    expect(referrerHost(referrer)).toBe(host);
  });

  it.each([
    ['https://www.Google.com/search?q=jane+doe', 'https://www.google.com/search'],
    ['https://user:pass@news.example.org/item#comments', 'https://news.example.org/item'],
    ['http://www2.example.org', 'http://www2.example.org/'],
    // The path in a page's one spelling (canonicalPath): escapes of UTF-8 decoded, the rest in upper case.
    ['https://shop.example:8443/a%20b/c?x=1', 'https://shop.example:8443/a b/c'],
    ['https://shop.example/caf%c3%a9/%2f%c3', 'https://shop.example/café/%2F%C3'],
    ['android-app://com.slack/', 'android-app://com.slack/'],
    ['mailto:jane@example.com', null],
    ['file:///Users/jane/page.html', null],
    ['not a url', null],
    ['', null],
    [undefined, null],
  ])('referrer %s stored as %s', (referrer, stored) => {
    expect(storedReferrer(referrer)).toBe(stored);
  });

  it('user agents: bots, devices', () => {
    expect(describeUserAgent('Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)')).toEqual({ bot: true, device: 'desktop' });
    expect(describeUserAgent('Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36').device).toBe('mobile');
    expect(describeUserAgent('Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 Chrome/126.0 Safari/537.36').device).toBe('tablet');
    expect(describeUserAgent('Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 Version/17.5 Safari/605.1.15')).toEqual({ bot: false, device: 'desktop' });
  });

  it("a Macintosh user agent with the tracker's touch-screen hint is an iPad (tablet); with any other the hint changes nothing", () => {
    // Safari on iPadOS 13+: the Mac's user agent word for word.
    const ipadSafari = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15';
    expect(describeUserAgent(ipadSafari)).toEqual({ bot: false, device: 'desktop' });
    expect(describeUserAgent(ipadSafari, true)).toEqual({ bot: false, device: 'tablet' });
    expect(describeUserAgent(ipadSafari, false).device).toBe('desktop');
    expect(describeUserAgent(ipadSafari, null).device).toBe('desktop');
    // The hint first, then none: the cache keeps both answers apart.
    const macFirefox = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:128.0) Gecko/20100101 Firefox/128.0';
    expect(describeUserAgent(macFirefox, true).device).toBe('tablet');
    expect(describeUserAgent(macFirefox).device).toBe('desktop');
    for (const [userAgent, device] of [
      ['Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36', 'mobile'],
      ['Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36', 'desktop'],
      ['Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36', 'desktop'],
      ['Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1', 'mobile'],
      ['Mozilla/5.0 (Linux; Android 13; SM-X710) AppleWebKit/537.36 Chrome/126.0 Safari/537.36', 'tablet'],
    ]) {
      expect(describeUserAgent(userAgent, true).device, userAgent).toBe(device);
    }
    // A bot stays a bot, hint or not.
    expect(describeUserAgent('Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 Safari/605.1.15 (Applebot/0.1)', true).bot).toBe(true);
  });

  it('visitor ids rotate with the UTC day and differ per website, IP and user agent', () => {
    const visitorId = createVisitorIds('a-secret-of-at-least-thirty-two-characters');
    const base = { websiteId: 'w1', ip: '192.0.2.1', userAgent: 'UA', at: new Date('2026-03-01T10:00:00Z') };
    const id = visitorId(base);
    // SHA-256 over the day's salt and then the text: ids already handed out the same day stay the same.
    const salt = createHmac('sha256', 'a-secret-of-at-least-thirty-two-characters').update('analytics-visitor-salt:2026-03-01').digest();
    expect(id).toBe(createHash('sha256').update(salt).update('w1\n192.0.2.1\nUA').digest('base64url').slice(0, 22));
    expect(visitorId({ ...base, userAgent: 'Ünïcode agent ✓' })).toBe(
      createHash('sha256').update(salt).update('w1\n192.0.2.1\nÜnïcode agent ✓').digest('base64url').slice(0, 22),
    );
    expect(visitorId({ ...base, at: new Date('2026-03-01T23:59:59Z') })).toBe(id);
    expect(visitorId({ ...base, at: new Date('2026-03-02T00:00:00Z') })).not.toBe(id);
    expect(visitorId({ ...base, websiteId: 'w2' })).not.toBe(id);
    expect(visitorId({ ...base, ip: '192.0.2.2' })).not.toBe(id);
    expect(visitorId({ ...base, userAgent: 'UA2' })).not.toBe(id);
    expect(visitorId({ ...base, userId: 'member' })).toBe('member');
    expect(createVisitorIds('another-secret-of-at-least-thirty-two-chars')(base)).not.toBe(id);
  });
});

describe('days and ids', () => {
  it('calendar days', () => {
    expect(isCalendarDay('2028-02-29')).toBe(true);
    expect(isCalendarDay('2026-02-29')).toBe(false);
    expect(isCalendarDay('2026-13-01')).toBe(false);
    expect(isCalendarDay('2026-1-01')).toBe(false);
    // Date.UTC reads years 0 to 99 as 1900 to 1999, so none of their days was one.
    expect(isCalendarDay('0096-02-29')).toBe(true);
    expect(isCalendarDay('0099-12-03')).toBe(true);
    expect(addDays('2026-03-01', -1)).toBe('2026-02-28');
    expect(daysInRange('2026-01-01', '2026-12-31')).toBe(365);
    expect(daysInRange('2026-01-02', '2026-01-01')).toBe(0);
  });

  it('UUIDv7: version 7, RFC variant, ordered by time', () => {
    const earlier = uuidv7(1_700_000_000_000);
    const later = uuidv7(1_700_000_000_001);
    expect(earlier).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(earlier < later).toBe(true);
    expect(parseInt(earlier.replace('-', '').slice(0, 12), 16)).toBe(1_700_000_000_000);
  });
});

describe('a page in one spelling, on a crafted path', () => {
  it("tries the engine's decoder once per path, not once per run of escapes (a throw each had cost 5–12 ms a request)", () => {
    const decode = vi.spyOn(globalThis, 'decodeURIComponent');
    try {
      const crafted = `/${'%c3x'.repeat(500)}`;
      expect(canonicalPath(crafted, 2048)).toBe(`/${'%C3x'.repeat(500)}`);
      expect(decode.mock.calls.length).toBeLessThanOrEqual(1);
      decode.mockClear();
      expect(canonicalPath(`/caf%c3%a9/${'%2f%c3%a9'.repeat(200)}`, 2048)).toBe(`/café/${'%2Fé'.repeat(200)}`);
      expect(decode.mock.calls.length).toBeLessThanOrEqual(1);
    } finally {
      decode.mockRestore();
    }
  });
});
