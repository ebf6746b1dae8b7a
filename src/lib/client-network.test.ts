import { describe, expect, it } from 'vitest';
import { clientNetworkOf, forwardedForWithoutForgedEntries } from './client-network.ts';

describe('clientNetworkOf', () => {
  it('keeps an IPv4 address as it is', () => {
    expect(clientNetworkOf('203.0.113.10')).toBe('203.0.113.10');
  });

  it('counts every address of one IPv6 /64 as one client, however it is written', () => {
    const network = '2001:db8:1:2::/64';
    for (const address of ['2001:db8:1:2::1', '2001:db8:1:2::a', '2001:0db8:0001:0002:ffff:ffff:ffff:ffff', '2001:DB8:1:2:0:0:0:11', '2001:db8:1:2::1%eth0', '2001:db8:1:2::192.0.2.1']) {
      expect(clientNetworkOf(address), address).toBe(network);
    }
    expect(clientNetworkOf('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(clientNetworkOf('::1')).toBe('0:0:0:0::/64');
    expect(clientNetworkOf('fe80::1')).toBe('fe80:0:0:0::/64');
  });

  it('reads an IPv4 client behind an IPv6 socket as that IPv4 client', () => {
    expect(clientNetworkOf('::ffff:203.0.113.10')).toBe('203.0.113.10');
    expect(clientNetworkOf('::ffff:cb00:710a')).toBe('203.0.113.10');
  });

  it('answers the same past the bound of remembered addresses', () => {
    for (let i = 0; i < 25_000; i += 1) expect(clientNetworkOf(`2001:db8:${(i % 7).toString(16)}:${i.toString(16)}::${i.toString(16)}`)).toBe(`2001:db8:${(i % 7).toString(16)}:${i.toString(16)}::/64`);
    expect(clientNetworkOf('2001:db8:1:2::1')).toBe('2001:db8:1:2::/64');
  });

  it('leaves anything that is not an address alone', () => {
    expect(clientNetworkOf('unknown')).toBe('unknown');
  });
});

describe('forwardedForWithoutForgedEntries', () => {
  it('keeps a header of addresses as it is', () => {
    for (const header of ['203.0.113.7', '1.2.3.4, 203.0.113.7', ' 2001:db8::1 ,10.0.0.5', '1.2.3.4,,5.6.7.8', '', ',', ',, 203.0.113.7', ', 203.0.113.7', ',1.2.3.4']) {
      expect(forwardedForWithoutForgedEntries(header), header).toBe(header);
    }
  });

  it('drops the right-most entry that is not an address and everything before it', () => {
    expect(forwardedForWithoutForgedEntries('not-an-ip, 127.0.0.1')).toBe('127.0.0.1');
    expect(forwardedForWithoutForgedEntries('1.2.3.4, <script>, 10.0.0.1, ::1')).toBe('10.0.0.1, ::1');
    expect(forwardedForWithoutForgedEntries('x, 1.2.3.4, [::1, 10.0.0.1')).toBe('10.0.0.1');
    expect(forwardedForWithoutForgedEntries('1.2.3.4:99999')).toBeUndefined();
    expect(forwardedForWithoutForgedEntries('10.0.0.1, unknown')).toBeUndefined();
    expect(forwardedForWithoutForgedEntries(',x, 203.0.113.7')).toBe('203.0.113.7');
  });

  it('reads an entry written with its port, or an IPv6 address in brackets, as the address, and writes the address alone', () => {
    expect(forwardedForWithoutForgedEntries('1.2.3.4:5678')).toBe('1.2.3.4');
    expect(forwardedForWithoutForgedEntries('[2001:db8::1]:443')).toBe('2001:db8::1');
    expect(forwardedForWithoutForgedEntries('[2001:db8::1]')).toBe('2001:db8::1');
    expect(forwardedForWithoutForgedEntries('[::ffff:203.0.113.7]:0')).toBe('::ffff:203.0.113.7');
    expect(forwardedForWithoutForgedEntries('198.51.100.1:1, 203.0.113.7:65535, 10.0.0.5')).toBe('198.51.100.1, 203.0.113.7, 10.0.0.5');
    expect(forwardedForWithoutForgedEntries(' [2001:db8::7]:8080 ,10.0.0.5')).toBe(' 2001:db8::7 ,10.0.0.5');
    // A bare IPv6 address is one as it stands: its last group is never taken for a port.
    expect(forwardedForWithoutForgedEntries('2001:db8::1:443')).toBe('2001:db8::1:443');
    // The forged part of a header still goes, the ports of what is kept are removed.
    expect(forwardedForWithoutForgedEntries('1.2.3.4:80, junk, 203.0.113.7:5678, 10.0.0.5')).toBe('203.0.113.7, 10.0.0.5');
  });

  it('takes an entry with a port that is not one, or an address that is not, for a forged entry', () => {
    for (const entry of [
      '1.2.3.4:65536',
      '1.2.3.4:123456',
      '1.2.3.4:',
      '1.2.3.4:80a',
      '1.2.3.4:-1',
      '1.2.3.4: 80',
      '1.2.3.4:80:80',
      '1.2.3.400:80',
      'example.com:80',
      '[1.2.3.4]:80',
      '[2001:db8::1]:',
      '[2001:db8::1]:65536',
      '[2001:db8::1]443',
      '[2001:db8::1',
      '2001:db8::1]:443',
      '[]:443',
      '[not-an-ip]:443',
    ]) {
      expect(forwardedForWithoutForgedEntries(`${entry}, 203.0.113.7`), entry).toBe('203.0.113.7');
    }
  });
});
