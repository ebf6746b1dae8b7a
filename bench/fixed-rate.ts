import http from 'node:http';
import { latencyFigures, type Measured } from './load.ts';

// A load at a fixed rate: request i is due at start + i / rate, whatever the
// server did with the ones before it (an open loop, as wrk2 and k6's
// constant-arrival-rate run). Its latency is counted from when this process
// issued it, not from when a connection was free to send it, so time spent
// queued behind a slow answer counts (no coordinated omission). It is not
// counted from the due time itself: Node's timers wake up to a millisecond
// late, and that lateness is this process's, not the server's; it is reported
// apart (`issuedLateP99Ms`).
//
// autocannon's `overallRate` is not this: each connection sends its share of
// the second's requests back to back as soon as the second starts, then waits
// for the next one (its httpClient resets `reqsMadeThisSecond` on a 1 s
// interval). At 1,000 req/s over 10 connections that is a saturated burst of
// 1,000 requests and then an idle gap, every second.

export interface FixedRateRequest {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string;
}

export interface FixedRateOptions {
  /** Origin, e.g. http://127.0.0.1:3000. */
  url: string;
  /** Requests a second, evenly spaced. */
  rate: number;
  durationS: number;
  /** Keep-alive connections at most; a request due while all are busy waits for one, and its wait counts. */
  connections: number;
  /** The i-th request (from 0). */
  request: (index: number) => FixedRateRequest;
  /** Each answer's status and body, in the order they arrive. */
  onResponse?: (status: number, body: string) => void;
  /** Longest a connection may sit silent waiting for an answer before the request counts as a timeout. */
  timeoutMs?: number;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export async function measureAtFixedRate(options: FixedRateOptions): Promise<Measured> {
  const { rate, durationS, connections } = options;
  const timeoutMs = options.timeoutMs ?? 10_000;
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  const total = Math.round(rate * durationS);
  const intervalMs = 1000 / rate;
  const latencies: number[] = [];
  /** How long after its due time each request was issued. */
  const late: number[] = [];
  const statusCodes: Record<string, number> = {};
  let non2xx = 0;
  let errors = 0;
  let timeouts = 0;
  const inFlight = new Set<Promise<void>>();

  const send = (index: number) => {
    const issuedAt = performance.now();
    const { method = 'GET', path, headers = {}, body } = options.request(index);
    const sent = new Promise<void>((resolve) => {
      const request = http.request(`${options.url}${path}`, { method, headers: body === undefined ? headers : { ...headers, 'content-length': Buffer.byteLength(body) }, agent, timeout: timeoutMs }, (response) => {
        const chunks: Buffer[] = [];
        response.on('data', (chunk: Buffer) => chunks.push(chunk));
        response.on('end', () => {
          const status = response.statusCode ?? 0;
          statusCodes[status] = (statusCodes[status] ?? 0) + 1;
          if (status >= 200 && status < 300) latencies.push(performance.now() - issuedAt);
          else non2xx += 1;
          options.onResponse?.(status, Buffer.concat(chunks).toString('utf8'));
          resolve();
        });
        response.on('error', () => {
          errors += 1;
          resolve();
        });
      });
      let timedOut = false;
      request.on('timeout', () => {
        timedOut = true;
        timeouts += 1;
        request.destroy(new Error('timeout'));
      });
      request.on('error', () => {
        if (!timedOut) errors += 1;
        resolve();
      });
      request.end(body);
    });
    inFlight.add(sent);
    void sent.then(() => inFlight.delete(sent));
  };

  const start = performance.now();
  let next = 0;
  while (next < total) {
    const elapsed = performance.now() - start;
    const due = Math.min(total, Math.floor(elapsed / intervalMs) + 1);
    for (; next < due; next += 1) {
      late.push(performance.now() - (start + next * intervalMs));
      send(next);
    }
    const wait = start + next * intervalMs - performance.now();
    if (wait > 0) await sleep(wait);
  }
  await Promise.all(inFlight);
  const elapsedS = (performance.now() - start) / 1000;
  agent.destroy();

  latencies.sort((a, b) => a - b);
  late.sort((a, b) => a - b);
  return {
    requestsPerSecond: Math.round(latencies.length / elapsedS),
    total: latencies.length + non2xx,
    non2xx,
    errors,
    timeouts,
    statusCodes,
    ...latencyFigures(latencies),
    issuedLateP99Ms: latencyFigures(late).p99Ms,
  };
}
