import { execFileSync } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { PATCHED_PACKAGES, unpatchedDependency } from './patches-check.ts';

// The check against this checkout's node_modules, and against copies of its
// packages in a temporary directory: one with a patch taken back out (patch -R,
// what `npm ci --ignore-scripts` leaves), one of another version.

const ROOT = path.resolve(import.meta.dirname, '../..');
const FIX = 'run npm ci (install scripts on: its postinstall applies the patch) or npx patch-package';

const directories: string[] = [];
afterEach(async () => {
  for (const directory of directories.splice(0)) await rm(directory, { recursive: true, force: true });
});

/** A directory whose node_modules has `copied` as copies (changeable) and the other patched packages linked; the file URL to check from. */
async function installWith(copied: string[]): Promise<{ directory: string; from: URL }> {
  const directory = await mkdtemp(path.join(tmpdir(), 'patches-check-'));
  directories.push(directory);
  await mkdir(path.join(directory, 'node_modules'));
  for (const name of ['postgres', 'ioredis']) {
    const source = path.join(ROOT, 'node_modules', name);
    const target = path.join(directory, 'node_modules', name);
    if (copied.includes(name)) await cp(source, target, { recursive: true });
    else await symlink(source, target);
  }
  return { directory, from: pathToFileURL(path.join(directory, 'server.js')) };
}

/** Takes `name`'s patch back out of the copy, as the package is without it. */
function unpatch(directory: string, patch: string) {
  execFileSync('patch', ['-R', '-p1', '-s', '-d', directory, '-i', path.join(ROOT, 'patches', patch)]);
}

describe('the start looks for what each dependency patch adds', () => {
  it('this checkout: every patch in effect', () => {
    expect(unpatchedDependency()).toBeUndefined();
  });

  it('postgres.js as published (the patch taken out): the line names the patch, the file and the fix', async () => {
    const { directory, from } = await installWith(['postgres']);
    expect(unpatchedDependency(from)).toBeUndefined();
    unpatch(directory, 'postgres+3.4.9.patch');
    expect(unpatchedDependency(from)).toBe(`postgres is not patched (patches/postgres+3.4.9.patch is not in effect in node_modules/postgres/src/connection.js): ${FIX}`);
  });

  it('ioredis as published: named the same way', async () => {
    const { directory, from } = await installWith(['ioredis']);
    unpatch(directory, 'ioredis+5.11.1.patch');
    expect(unpatchedDependency(from)).toBe(`ioredis is not patched (patches/ioredis+5.11.1.patch is not in effect in node_modules/ioredis/built/Command.js): ${FIX}`);
  });

  it('another version than the patch is for: refused even if it carries the mark', async () => {
    const { directory, from } = await installWith(['postgres']);
    const manifest = path.join(directory, 'node_modules/postgres/package.json');
    await writeFile(manifest, (await readFile(manifest, 'utf8')).replace('"version": "3.4.9"', '"version": "3.4.10"'));
    expect(unpatchedDependency(from)).toBe('postgres 3.4.10 is installed, but patches/postgres+3.4.9.patch is for 3.4.9: install postgres@3.4.9 exactly (npm ci), or update the patch');
  });
});

describe('the install keeps to the versions the patches are for', () => {
  it('package.json pins each patched package to its patch\'s version, the check knows every patch, and a patch that fails fails the install', async () => {
    const manifest = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string>; scripts: Record<string, string> };
    const patches = (await readdir(path.join(ROOT, 'patches'))).filter((file) => file.endsWith('.patch')).sort();
    expect(patches).toEqual(PATCHED_PACKAGES.map(({ name, version }) => `${name}+${version}.patch`).sort());
    // A range let npm install or npm update move past the version a patch applies to.
    for (const { name, version } of PATCHED_PACKAGES) expect(manifest.dependencies[name], name).toBe(version);
    // patch-package exits 0 on a patch that does not apply unless CI is set, or --error-on-fail given.
    expect(manifest.scripts.postinstall).toBe('patch-package --error-on-fail');
  });
});
