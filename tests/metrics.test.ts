import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { BEARER_CHALLENGES } from '../src/lib/errors.ts';
import { RateWindow } from '../src/lib/rate-window.ts';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import type { MetricsSnapshot } from '../src/plugins/metrics-snapshot.ts';
import { buildTestApp, TEST_ADMIN_JWT_SECRET } from './support/app.ts';

// Metrics live in a registry of each app's own, so the counts below are this
// app's requests only and can be compared exactly.

const METRICS_TOKEN = 'metrics-token-for-tests-0123456789';

describe('RateWindow', () => {
  it('averages the last minute, the current second included, and forgets older seconds', () => {
    const start = 1_000_000_000_000;
    const window = new RateWindow(60, start);
    for (let i = 0; i < 30; i += 1) window.record(start + 100);
    // A young window is divided by its age, at least one second.
    expect(window.perSecond(start + 200)).toBe(30);
    window.record(start + 1_500, 10);
    expect(window.lastSecond(start + 1_900)).toBe(30);
    expect(window.lastSecond(start + 2_100)).toBe(10);
    expect(window.perSecond(start + 2_000)).toBe(20);
    // A minute later both seconds have left the window.
    expect(window.perSecond(start + 62_500)).toBe(0);
    window.record(start + 62_500, 6);
    expect(window.perSecond(start + 63_000)).toBeCloseTo(6 / 60);
  });
});

describe('metrics', () => {
  let app: FastifyInstance;
  let adminToken: string;
  beforeAll(async () => {
    app = await buildTestApp({ METRICS_TOKEN });
    adminToken = await signLegacyAdminToken(TEST_ADMIN_JWT_SECRET, crypto.randomUUID());
  });
  afterAll(async () => app.close());

  const snapshot = async (): Promise<MetricsSnapshot> => {
    const response = await app.inject({ method: 'GET', url: '/api/admin/metrics', headers: { authorization: `Bearer ${adminToken}` } });
    expect(response.statusCode).toBe(200);
    return response.json().data;
  };
  const healthRoute = (s: MetricsSnapshot) => s.routes.find((r) => r.method === 'GET' && r.route === '/health');

  it('counts requests per route and status class, with latency percentiles', async () => {
    const before = await snapshot();
    for (let i = 0; i < 5; i += 1) expect((await app.inject({ method: 'GET', url: '/health' })).statusCode).toBe(200);
    expect((await app.inject({ method: 'GET', url: '/no/such/route' })).statusCode).toBe(404);

    // onResponse runs once the answer is out, so give it a moment.
    await expect.poll(async () => healthRoute(await snapshot())?.count ?? 0).toBe((healthRoute(before)?.count ?? 0) + 5);
    const after = await snapshot();
    expect(after.requests.total).toBeGreaterThanOrEqual(before.requests.total + 6);
    expect(after.requests.byStatusClass['4xx'] ?? 0).toBe((before.requests.byStatusClass['4xx'] ?? 0) + 1);
    expect(after.requests.byStatusCode['404']).toBe((before.requests.byStatusCode['404'] ?? 0) + 1);
    expect(after.routes.find((r) => r.route === '(unmatched)')).toMatchObject({ count: 1, errors: 1, serverErrors: 0 });

    const health = healthRoute(after)!;
    expect(health.errors).toBe(0);
    for (const p of [health.latencyMs.p50, health.latencyMs.p95, health.latencyMs.p99]) expect(p).toBeGreaterThan(0);
    expect(health.latencyMs.p50!).toBeLessThanOrEqual(health.latencyMs.p99!);
    expect(after.latencyMs.p95).toBeGreaterThan(0);
    expect(after.requests.perSecond).toBeGreaterThan(0);
    expect(after.memory.rssBytes).toBeGreaterThan(after.memory.heapUsedBytes);
    expect(after.uptimeSeconds).toBeGreaterThanOrEqual(before.uptimeSeconds);
  });

  it('samples once a second for the dashboard, event-loop lag included', async () => {
    await expect.poll(() => app.metrics.history().length, { timeout: 5_000, interval: 200 }).toBeGreaterThan(1);
    const [sample] = app.metrics.history();
    expect(sample.rssBytes).toBeGreaterThan(0);
    expect(sample.eventLoopLagP99Ms).toBeGreaterThanOrEqual(0);
    expect((await snapshot()).eventLoopLagMs.p99).toBeGreaterThanOrEqual(0);
  });

  it('event-loop lag is what the loop was late by, not the sampling interval: an idle loop reads well under 10 ms', async () => {
    // The histogram records the time between the sampling timer's runs, every 10 ms: read as it
    // is, a loop never late read at least 10 ms. What it is late by, the median run, is about 0.
    await expect.poll(() => app.metrics.history().length, { timeout: 5_000, interval: 200 }).toBeGreaterThan(1);
    expect((await snapshot()).eventLoopLagMs.p50).toBeLessThan(10);
  });

  it('serves Prometheus text at /metrics for the METRICS_TOKEN bearer only', async () => {
    await app.inject({ method: 'GET', url: '/health' });
    // RFC 6750's challenge, as on the other Bearer routes: `invalid_token` only when a token came.
    for (const [headers, challenge] of [
      [{}, BEARER_CHALLENGES.missing],
      [{ authorization: 'Basic bWV0cmljczpzZWNyZXQ=' }, BEARER_CHALLENGES.missing],
      [{ authorization: 'Bearer wrong-token-of-some-length' }, BEARER_CHALLENGES.invalid],
      [{ authorization: `Bearer ${adminToken}` }, BEARER_CHALLENGES.invalid],
    ] as const) {
      const refused = await app.inject({ method: 'GET', url: '/metrics', headers });
      expect(refused.statusCode).toBe(401);
      expect(refused.json()).toEqual({ success: false, error: 'Authentication required', statusCode: 401 });
      expect(refused.headers['www-authenticate'], JSON.stringify(headers)).toBe(challenge);
    }
    expect(BEARER_CHALLENGES.missing).toBe('Bearer');
    const response = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toContain('text/plain');
    const text = response.body;
    expect(text).toMatch(/http_requests_total\{method="GET",route="\/health",status_class="2xx"\} \d+/);
    expect(text).toMatch(/http_request_duration_seconds\{quantile="0.99",method="GET",route="\/health"\} [\d.e-]+/);
    expect(text).toContain('# TYPE http_server_request_duration_seconds histogram');
    expect(text).toMatch(/http_server_request_duration_seconds_bucket\{le="\+Inf",method="GET",route="\/health"\} [1-9]\d*/);
    for (const name of [
      'http_requests_per_second',
      'process_resident_memory_bytes',
      'nodejs_heap_used_bytes',
      'nodejs_eventloop_lag_p99_seconds',
      'process_uptime_seconds',
      'app_logs_dropped_total',
    ]) {
      expect(text).toContain(`# TYPE ${name} `);
    }
    // Two standard process metrics, as ready-made dashboards name them.
    const value = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(value('process_cpu_seconds_total')).toBeGreaterThan(0);
    expect(Math.abs(value('process_start_time_seconds') - (Date.now() / 1000 - process.uptime()))).toBeLessThanOrEqual(1);
    // Prometheus's naming rule, which rate() and promtool rely on: a name ending in _total is a counter.
    const types = [...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map(([, name, type]) => [name, type]);
    expect(types.filter(([name, type]) => name.endsWith('_total') && type !== 'counter')).toEqual([]);
    expect(types.filter(([name]) => name.endsWith('_total')).length).toBeGreaterThanOrEqual(4);
  });

  it('app_logs_dropped_total counts each entry the full log queue dropped, once, however often it is scraped', async () => {
    const dropped = async () => {
      const text = (await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).body;
      return Number(/^app_logs_dropped_total (\S+)$/m.exec(text)?.[1]);
    };
    const before = await dropped();
    // More warn lines at once than the queue holds (1,000): the writer has no turn to drain it in between.
    for (let i = 0; i < 1_100; i += 1) app.log.warn({ i }, 'metrics test: a burst of log lines');
    const counted = app.appLogs.stats().dropped;
    expect(counted - before).toBeGreaterThanOrEqual(100);
    expect(await dropped()).toBe(counted);
    expect(await dropped()).toBe(counted);
  });

  it("the last-minute latency gauges say NaN once a minute has passed without requests, not the old figures", async () => {
    const recent = async () => {
      const text = (await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${METRICS_TOKEN}` } })).body;
      return Object.fromEntries([...text.matchAll(/^http_request_duration_recent_seconds\{quantile="([\d.]+)"\} (\S+)$/gm)].map(([, q, v]) => [q, v]));
    };
    await app.inject({ method: 'GET', url: '/health' });
    const busy = await recent();
    expect(Object.keys(busy).sort()).toEqual(['0.5', '0.95', '0.99']);
    for (const value of Object.values(busy)) expect(Number(value)).toBeGreaterThan(0);
    // Two quiet minutes later (the scrape itself is not counted: /metrics has metrics: false).
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 120_000 });
    try {
      // A gauge keeps its last value until set again: an idle service reported its last burst's latency for ever.
      // prom-client writes NaN as `Nan`, which Prometheus reads as NaN (Go's ParseFloat ignores case).
      expect(await recent()).toEqual({ '0.5': 'Nan', '0.95': 'Nan', '0.99': 'Nan' });
      expect((await app.metrics.snapshot()).latencyMs).toEqual({ p50: null, p95: null, p99: null });
    } finally {
      vi.useRealTimers();
    }
  });

  it('has no /metrics route when METRICS_TOKEN is unset, and refuses too short a token', async () => {
    const plain = await buildTestApp();
    try {
      expect((await plain.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(404);
    } finally {
      await plain.close();
    }
    await expect(buildTestApp({ METRICS_TOKEN: 'short' })).rejects.toThrow(/METRICS_TOKEN is invalid/);
  });

  it('keeps the registries of two apps apart', async () => {
    const other = await buildTestApp();
    try {
      const response = await other.inject({ method: 'GET', url: '/api/admin/metrics', headers: { authorization: `Bearer ${adminToken}` } });
      const routes: MetricsSnapshot['routes'] = response.json().data.routes;
      expect(routes.find((r) => r.route === '/health')).toBeUndefined();
    } finally {
      await other.close();
    }
  });
});
