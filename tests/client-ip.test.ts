import type { FastifyInstance } from 'fastify';
import { describe, expect, it } from 'vitest';
import { ConfigError, parseConfig } from '../src/config.ts';
import { buildTestApp, buildTestAppWithLog } from './support/app.ts';

// Which address is the client's. A client writes whatever it likes into
// X-Forwarded-For; only the entries that trusted proxies appended are
// believed, so nobody picks their own IP to escape the per-IP limits, the
// captcha's remote IP or the visitor hash.

const PROXY = '10.0.0.5';
const CLIENT = '203.0.113.7';

async function echoIp(app: FastifyInstance) {
  app.get('/t/ip', async (request) => ({ ip: request.ip }));
}

const ipOf = async (app: FastifyInstance, remoteAddress: string, forwardedFor?: string) =>
  (
    await app.inject({ method: 'GET', url: '/t/ip', remoteAddress, headers: forwardedFor ? { 'x-forwarded-for': forwardedFor } : {} })
  ).json().ip as string;

describe('TRUST_PROXY', () => {
  it('one reverse proxy (TRUST_PROXY=1): a forged X-Forwarded-For entry is not the client IP', async () => {
    const app = await buildTestApp({ TRUST_PROXY: '1' }, echoIp);
    try {
      // The client sent "X-Forwarded-For: 1.2.3.4"; the proxy appended the address it saw.
      expect(await ipOf(app, PROXY, `1.2.3.4, ${CLIENT}`)).toBe(CLIENT);
      expect(await ipOf(app, PROXY, CLIENT)).toBe(CLIENT);
    } finally {
      await app.close();
    }
  });

  it('proxy addresses / CIDR ranges: only a trusted peer is believed', async () => {
    const app = await buildTestApp({ TRUST_PROXY: '10.0.0.0/8, 127.0.0.1' }, echoIp);
    try {
      expect(await ipOf(app, PROXY, `1.2.3.4, ${CLIENT}`)).toBe(CLIENT);
      // A client connecting directly, not through the proxy, cannot claim anything.
      expect(await ipOf(app, '198.51.100.3', `1.2.3.4, ${CLIENT}`)).toBe('198.51.100.3');
    } finally {
      await app.close();
    }
  });

  it('a CDN in front of the proxy: two hops, or the CDN ranges plus the proxy', async () => {
    const cdnEdge = '173.245.48.10';
    for (const setting of ['2', '10.0.0.0/8,173.245.48.0/20']) {
      const app = await buildTestApp({ TRUST_PROXY: setting }, echoIp);
      try {
        // client → CDN (appends the client) → proxy (appends the CDN edge) → app.
        expect(await ipOf(app, PROXY, `1.2.3.4, ${CLIENT}, ${cdnEdge}`), setting).toBe(CLIENT);
      } finally {
        await app.close();
      }
    }
  });

  it('rotating forged X-Forwarded-For values does not escape the general limit', async () => {
    const app = await buildTestApp({ TRUST_PROXY: '1', RATE_LIMIT_GENERAL_PER_15MIN: '100' }, echoIp);
    try {
      const codes: number[] = [];
      for (let i = 0; i <= 100; i += 1) {
        const forged = `192.0.2.${i % 250}`;
        const response = await app.inject({ method: 'GET', url: '/t/ip', remoteAddress: PROXY, headers: { 'x-forwarded-for': `${forged}, ${CLIENT}` } });
        codes.push(response.statusCode);
      }
      expect(codes.slice(0, 100).every((code) => code === 200)).toBe(true);
      expect(codes[100]).toBe(429);
    } finally {
      await app.close();
    }
  });

  it('an entry from a trusted hop that is not an IP address is not the client: the nearest trusted hop or the socket is', async () => {
    // nginx on the same host with TRUST_PROXY=loopback: a local client's own header is one hop short of nginx's entry.
    const loopback = await buildTestApp({ TRUST_PROXY: 'loopback' }, echoIp);
    const twoHops = await buildTestApp({ TRUST_PROXY: '2' }, echoIp);
    try {
      expect(await ipOf(loopback, '127.0.0.1', 'not-an-ip, 127.0.0.1')).toBe('127.0.0.1');
      expect(await ipOf(loopback, '127.0.0.1', '<script>')).toBe('127.0.0.1');
      expect(await ipOf(loopback, '::1', `1.2.3.4, 1.2.3.4:99999, ::1`)).toBe('::1');
      // A hop count one too high: the entry past the real chain was the client's.
      expect(await ipOf(twoHops, PROXY, `<script>, ${CLIENT}`)).toBe(CLIENT);
      expect(await ipOf(twoHops, PROXY, 'not-an-ip')).toBe(PROXY);
      // Addresses alone, and forged entries the trust never reached, change nothing.
      expect(await ipOf(twoHops, PROXY, `1.2.3.4, ${CLIENT}, 10.0.0.9`)).toBe(CLIENT);
      expect(await ipOf(twoHops, PROXY, `junk, 1.2.3.4, ${CLIENT}, 10.0.0.9`)).toBe(CLIENT);
    } finally {
      await loopback.close();
      await twoHops.close();
    }
  });

  it('rotating non-address values through a trusted hop does not escape the general limit, and is logged a bounded number of times', async () => {
    const { app, lines } = await buildTestAppWithLog({ TRUST_PROXY: 'loopback', RATE_LIMIT_GENERAL_PER_15MIN: '100' }, 'warn', echoIp);
    try {
      const codes: number[] = [];
      for (let i = 0; i <= 100; i += 1) {
        const response = await app.inject({ method: 'GET', url: '/t/ip', remoteAddress: '127.0.0.1', headers: { 'x-forwarded-for': `not-an-ip-${i}, 127.0.0.1` } });
        codes.push(response.statusCode);
      }
      expect(codes.slice(0, 100).every((code) => code === 200)).toBe(true);
      expect(codes[100]).toBe(429);
      const warnings = lines.map((line) => JSON.parse(line)).filter((entry) => entry.xForwardedFor !== undefined);
      expect(warnings).toHaveLength(10);
      expect(warnings[0]).toMatchObject({ level: 40, xForwardedFor: 'not-an-ip-0, 127.0.0.1', kept: '127.0.0.1', peer: '127.0.0.1' });
    } finally {
      await app.close();
    }
  });

  it('a balancer that writes the client\'s port: the client is its address, port removed, with a budget of its own (real HTTP)', async () => {
    // The balancer on this host (TRUST_PROXY=loopback) writes `address:port` and `[IPv6]:port`,
    // each connection of a client from another port, as Azure Application Gateway does.
    const { app, lines } = await buildTestAppWithLog({ TRUST_PROXY: 'loopback', RATE_LIMIT_GENERAL_PER_15MIN: '3' }, 'http', echoIp);
    try {
      const origin = await app.listen({ host: '127.0.0.1', port: 0 });
      const send = async (forwardedFor: string) => {
        const response = await fetch(`${origin}/t/ip`, { headers: { 'x-forwarded-for': forwardedFor } });
        return { status: response.status, ip: response.status === 200 ? ((await response.json()) as { ip: string }).ip : undefined };
      };
      expect(await send('203.0.113.7:50001')).toEqual({ status: 200, ip: '203.0.113.7' });
      expect(await send('[2001:db8:1:2::1]:443')).toEqual({ status: 200, ip: '2001:db8:1:2::1' });
      // A client's own entry before the balancer's is not believed, port or none.
      expect(await send('198.51.100.9:80, 203.0.113.7:50002')).toEqual({ status: 200, ip: '203.0.113.7' });
      expect(await send('203.0.113.7')).toEqual({ status: 200, ip: '203.0.113.7' });
      // The budget of 3 is per client, not the balancer's: a fourth request from 203.0.113.7 is refused
      // whatever its port, the other clients still get theirs.
      expect(await send('203.0.113.7:50003')).toEqual({ status: 429, ip: undefined });
      expect(await send('203.0.113.8:50003')).toEqual({ status: 200, ip: '203.0.113.8' });
      // An IPv6 client is counted per /64, as without the port.
      expect(await send('[2001:db8:1:2::2]:444')).toEqual({ status: 200, ip: '2001:db8:1:2::2' });
      expect(await send('[2001:db8:1:2::3]')).toEqual({ status: 200, ip: '2001:db8:1:2::3' });
      expect(await send('[2001:db8:1:2::4]:445')).toEqual({ status: 429, ip: undefined });
      expect(await send('[2001:db8:1:3::1]:445')).toEqual({ status: 200, ip: '2001:db8:1:3::1' });
      // A port that is not one makes the entry no address: the balancer's own budget, as before.
      expect(await send('203.0.113.9:65536')).toEqual({ status: 200, ip: '127.0.0.1' });

      const entries = lines.map((line) => JSON.parse(line));
      const logged = entries.filter((entry) => entry.msg === 'request completed').map((entry) => [entry.ip, entry.statusCode]);
      expect(logged).toEqual([
        ['203.0.113.7', 200],
        ['2001:db8:1:2::1', 200],
        ['203.0.113.7', 200],
        ['203.0.113.7', 200],
        ['203.0.113.7', 429],
        ['203.0.113.8', 200],
        ['2001:db8:1:2::2', 200],
        ['2001:db8:1:2::3', 200],
        ['2001:db8:1:2::4', 429],
        ['2001:db8:1:3::1', 200],
        ['127.0.0.1', 200],
      ]);
      // Removing a port drops nothing, so it warns of nothing; only the bad port is warned of.
      expect(entries.filter((entry) => entry.xForwardedFor !== undefined).map((entry) => entry.xForwardedFor)).toEqual(['203.0.113.9:65536']);
    } finally {
      await app.close();
    }
  });

  it('TRUST_PROXY=true (trust every hop) is refused at start-up with one line', () => {
    expect(() => parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: 'true' })).toThrow(ConfigError);
    expect(() => parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: 'true' })).toThrow(/^Invalid configuration: TRUST_PROXY is invalid/);
    expect(() => parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: '10.0.0.0/33' })).toThrow(/TRUST_PROXY is invalid/);
    expect(() => parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: 'not-an-address' })).toThrow(/TRUST_PROXY is invalid/);
    expect(parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x' }).TRUST_PROXY).toBe(false);
    expect(parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: 'false' }).TRUST_PROXY).toBe(false);
    expect(parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: '2' }).TRUST_PROXY).toBe(2);
    expect(parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x', TRUST_PROXY: 'loopback, 10.0.0.0/8,::1' }).TRUST_PROXY).toEqual([
      'loopback',
      '10.0.0.0/8',
      '::1',
    ]);
  });
});
