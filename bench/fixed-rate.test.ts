import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { measureAtFixedRate } from './fixed-rate.ts';

// The fixed-rate load of bench:read: requests spread over the second, not sent
// in a burst at its start, and a request that waits for a busy connection has
// its wait counted.

let server: http.Server | undefined;

afterEach(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  server = undefined;
});

async function listen(handler: http.RequestListener): Promise<string> {
  server = http.createServer(handler);
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('measureAtFixedRate', () => {
  it('spreads the requests evenly over the run', async () => {
    const arrivals: number[] = [];
    const url = await listen((request, response) => {
      arrivals.push(performance.now());
      response.end(request.url);
    });
    const paths: string[] = [];
    const result = await measureAtFixedRate({
      url,
      rate: 200,
      durationS: 1,
      connections: 4,
      request: (index) => ({ path: `/r/${index}` }),
      onResponse: (status, body) => paths.push(`${status} ${body}`),
    });

    expect(result.total).toBe(200);
    expect(result.non2xx + result.errors + result.timeouts).toBe(0);
    expect(paths).toHaveLength(200);
    expect(new Set(paths).size).toBe(200);
    expect(paths).toContain('200 /r/199');
    // Evenly spaced, a quarter of the run holds about a quarter of the requests
    // (a burst at the start of the second would put all 200 in it).
    const start = arrivals[0];
    const inFirstQuarter = arrivals.filter((t) => t - start < 250).length;
    expect(inFirstQuarter).toBeGreaterThanOrEqual(35);
    expect(inFirstQuarter).toBeLessThanOrEqual(65);
    expect(arrivals.at(-1)! - start).toBeGreaterThan(900);
  });

  it('counts the time a request waits for a busy connection', async () => {
    let seen = 0;
    const url = await listen((_request, response) => {
      seen += 1;
      // The first answer takes 200 ms; the requests due meanwhile queue behind it on the one connection.
      if (seen === 1) setTimeout(() => response.end('slow'), 200);
      else response.end('fast');
    });
    const result = await measureAtFixedRate({ url, rate: 50, durationS: 0.4, connections: 1, request: () => ({ path: '/' }) });

    expect(result.total).toBe(20);
    expect(result.maxMs).toBeGreaterThanOrEqual(190);
    // Requests due 20, 40 and 60 ms in waited about 180, 160 and 140 ms: the 18th of 20 latencies is one of them.
    expect(result.p90Ms).toBeGreaterThanOrEqual(100);
    // Once the queue has drained, answers come at once.
    expect(result.p50Ms).toBeLessThan(50);
  });

  it('counts answers that are not 2xx apart from the latencies', async () => {
    let seen = 0;
    const url = await listen((_request, response) => {
      seen += 1;
      response.statusCode = seen % 4 === 0 ? 503 : 200;
      response.end();
    });
    const result = await measureAtFixedRate({ url, rate: 100, durationS: 0.4, connections: 2, request: () => ({ path: '/' }) });

    expect(result.total).toBe(40);
    expect(result.non2xx).toBe(10);
    expect(result.statusCodes).toEqual({ 200: 30, 503: 10 });
  });
});
