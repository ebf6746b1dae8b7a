import type { IncomingMessage } from 'node:http';
import { isIP, isIPv4, isIPv6 } from 'node:net';
import type { FastifyBaseLogger } from 'fastify';

// Who a rate-limit budget belongs to. An IPv4 address is one client (or one
// NAT). An IPv6 client is handed a whole /64 at least, 2^64 addresses it can
// pick from at will, so counting per address would give it a fresh budget
// with every request: IPv6 clients are counted per /64 network.

/** The eight 16-bit groups of an IPv6 address (zone id dropped, embedded IPv4 read as two groups). */
function ipv6Groups(address: string): number[] {
  const bare = address.split('%')[0];
  const [head, tail] = bare.includes('::') ? bare.split('::') : [bare, undefined];
  const groupsOf = (part: string | undefined): number[] => {
    if (!part) return [];
    return part.split(':').flatMap((group) => {
      if (!group.includes('.')) return [Number.parseInt(group, 16)];
      const [a, b, c, d] = group.split('.').map(Number);
      return [(a << 8) | b, (c << 8) | d];
    });
  };
  const first = groupsOf(head);
  if (tail === undefined) return first;
  const last = groupsOf(tail);
  return [...first, ...new Array<number>(8 - first.length - last.length).fill(0), ...last];
}

// Reading an IPv6 address costs about a microsecond, a visible share of a
// request; a client sends many, so the answers are kept (up to a bound, then
// forgotten all at once: addresses that never come back cannot grow it).
const MAX_REMEMBERED = 10_000;
const remembered = new Map<string, string>();

/** The rate-limit subject of a client address: the address for IPv4, its /64 for IPv6. */
export function clientNetworkOf(ip: string): string {
  if (isIPv4(ip)) return ip;
  let network = remembered.get(ip);
  if (network === undefined) {
    network = isIPv6(ip) ? ipv6NetworkOf(ip) : ip;
    if (remembered.size >= MAX_REMEMBERED) remembered.clear();
    remembered.set(ip, network);
  }
  return network;
}

function ipv6NetworkOf(ip: string): string {
  const groups = ipv6Groups(ip);
  // An IPv4 client seen through an IPv6 socket (::ffff:a.b.c.d) is that IPv4 client.
  if (groups.slice(0, 5).every((group) => group === 0) && groups[5] === 0xffff) {
    return [groups[6] >> 8, groups[6] & 0xff, groups[7] >> 8, groups[7] & 0xff].join('.');
  }
  return `${groups
    .slice(0, 4)
    .map((group) => group.toString(16))
    .join(':')}::/64`;
}

// A trusted hop's X-Forwarded-For entry is taken as the client's address as it
// stands: with a hop count one too high, or `loopback` and a client on the same
// host, `not-an-ip` or `<script>` became the address in the logs, the
// rate-limit key and the address passed on to the auth server. Such an entry
// was written by the client (a proxy writes addresses), and so was everything
// before it.
//
// Some load balancers (Azure Application Gateway, some ingress controllers)
// write the client's address with its port: `1.2.3.4:5678`, `[2001:db8::1]:443`.
// Fastify reads no such entry as an address, so it was dropped as forged and
// every client behind the balancer shared the balancer's budget: it is the
// address, and the header keeps the address alone.

/** The largest TCP port. */
const MAX_PORT = 65_535;

const isPort = (text: string) => /^\d{1,5}$/.test(text) && Number(text) <= MAX_PORT;

/**
 * The address of an entry written with a port (`1.2.3.4:5678`, `[2001:db8::1]:443`)
 * or in brackets (`[2001:db8::1]`); undefined for anything else. Asked only of
 * entries that are not addresses as they stand: a bare IPv6 address, colons and
 * all, never comes here.
 */
function addressWithoutPort(entry: string): string | undefined {
  if (entry.startsWith('[')) {
    const end = entry.indexOf(']');
    if (end === -1) return undefined;
    const address = entry.slice(1, end);
    const rest = entry.slice(end + 1);
    return isIPv6(address) && (rest === '' || (rest.startsWith(':') && isPort(rest.slice(1)))) ? address : undefined;
  }
  const colon = entry.indexOf(':');
  if (colon === -1) return undefined;
  const address = entry.slice(0, colon);
  return isIPv4(address) && isPort(entry.slice(colon + 1)) ? address : undefined;
}

/**
 * X-Forwarded-For without its right-most entry that is not an IP address and
 * the entries before it; undefined when nothing is left. An entry of an
 * address with its port, or an IPv6 address in brackets, is that address, and
 * is written as the address alone. The same header when every entry is an
 * address as it stands. Fastify walks the header from the right and stops at
 * the first untrusted entry, so an answer that never reached the dropped entry
 * is unchanged, and one that did is what a request without it gets: the
 * nearest trusted hop's entry, or the socket's address.
 */
export function forwardedForWithoutForgedEntries(header: string): string | undefined {
  // Split, not searched back with lastIndexOf: a header starting with a comma
  // (nginx makes `, <client>` of a client's own `X-Forwarded-For: ,`) had that
  // search find the same comma again and again, and the process hang.
  const entries = header.split(',');
  let portsRemoved = false;
  for (let index = entries.length - 1; index >= 0; index -= 1) {
    const entry = entries[index].trim();
    // An empty entry (`a,,b`) is skipped, as Fastify's reading of the header skips it.
    if (entry === '' || isIP(entry) !== 0) continue;
    // Only an entry that is not an address as it stands is read for a port:
    // a header of plain addresses costs what it did.
    const address = addressWithoutPort(entry);
    if (address !== undefined) {
      entries[index] = entries[index].replace(entry, address);
      portsRemoved = true;
      continue;
    }
    const kept = entries.slice(index + 1).join(',').trim();
    return kept === '' ? undefined : kept;
  }
  return portsRemoved ? entries.join(',') : header;
}

const entryCount = (header: string) => header.split(',').length;

/** The most distinct dropped values an app logs: a client can send a new one with every request. */
const MAX_LOGGED_FORGED_VALUES = 10;

/**
 * Fastify's rewriteUrl, the one step that sees every request before anything
 * reads its address (routing errors included): drops the X-Forwarded-For
 * entries above, removes the entries' ports, and logs each distinct value that
 * lost entries once at warn, up to MAX_LOGGED_FORGED_VALUES. Leaves the URL as
 * it is.
 */
export function forgedForwardedForGuard(): (this: { log: FastifyBaseLogger }, request: IncomingMessage) => string {
  const logged = new Set<string>();
  return function dropForgedForwardedFor(request) {
    const header = request.headers['x-forwarded-for'];
    if (typeof header === 'string') {
      const kept = forwardedForWithoutForgedEntries(header);
      if (kept !== header) {
        if (kept === undefined) delete request.headers['x-forwarded-for'];
        else request.headers['x-forwarded-for'] = kept;
        // A header that only lost its entries' ports kept all of them: nothing in it was forged.
        const entriesDropped = kept === undefined || entryCount(kept) < entryCount(header);
        const dropped = header.slice(0, 200);
        if (entriesDropped && logged.size < MAX_LOGGED_FORGED_VALUES && !logged.has(dropped)) {
          logged.add(dropped);
          this.log.warn(
            { xForwardedFor: dropped, kept: kept ?? null, peer: request.socket.remoteAddress, furtherValuesLogged: MAX_LOGGED_FORGED_VALUES - logged.size },
            'X-Forwarded-For entry that is not an IP address ignored, with the entries before it (sent by a client; if through a trusted proxy, check TRUST_PROXY)',
          );
        }
      }
    }
    return request.url ?? '/';
  };
}
