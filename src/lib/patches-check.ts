import { readFileSync } from 'node:fs';
import { findPackageJSON } from 'node:module';
import path from 'node:path';

// Two dependencies run with our patches (patches/, applied by patch-package
// at npm's postinstall). Without them the server still started and /health
// answered 200, but every chained read or write answered 500 (`connection.chain
// is not a function`): `npm ci --ignore-scripts`, a patch that no longer
// applied (patch-package exited 0 then, unless CI was set), or a version moved
// past the one a patch is for. So the start looks for what each patch adds.

/** A patch of patches/ and what it adds: the files, of those the server loads, that say `portfolio-backend patch`. */
interface PatchedPackage {
  name: string;
  version: string;
  files: readonly string[];
}

/** Every comment our patches add starts so: a cheap mark of a file patched. */
const PATCH_MARK = 'portfolio-backend patch';

export const PATCHED_PACKAGES: readonly PatchedPackage[] = [
  // The ES module entry (src/), which the server imports; cjs/ is patched alike.
  { name: 'postgres', version: '3.4.9', files: ['src/connection.js', 'src/index.js', 'src/query.js', 'src/queue.js', 'src/result.js'] },
  { name: 'ioredis', version: '5.11.1', files: ['built/Command.js', 'built/Script.js'] },
];

/** Whether the file says it is patched; a file that cannot be read is not. */
function isPatched(file: string): boolean {
  try {
    return readFileSync(file, 'utf8').includes(PATCH_MARK);
  } catch {
    return false;
  }
}

/**
 * The one line a start is refused with when a patch is not in effect in the
 * packages `from` (a file URL) resolves; undefined when every patch is.
 */
export function unpatchedDependency(from: string | URL = import.meta.url, packages: readonly PatchedPackage[] = PATCHED_PACKAGES): string | undefined {
  for (const { name, version, files } of packages) {
    const patch = `patches/${name}+${version}.patch`;
    const fix = 'run npm ci (install scripts on: its postinstall applies the patch) or npx patch-package';
    const packageJson = findPackageJSON(name, from);
    if (packageJson === undefined) return `${name} is not installed: ${fix}`;
    const installed = (JSON.parse(readFileSync(packageJson, 'utf8')) as { version?: string }).version;
    if (installed !== version) {
      return `${name} ${installed} is installed, but ${patch} is for ${version}: install ${name}@${version} exactly (npm ci), or update the patch`;
    }
    const missing = files.find((file) => !isPatched(path.join(path.dirname(packageJson), file)));
    if (missing !== undefined) return `${name} is not patched (${patch} is not in effect in node_modules/${name}/${missing}): ${fix}`;
  }
  return undefined;
}
