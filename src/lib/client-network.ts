import { isIPv4, isIPv6 } from 'node:net';

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
