import { cp, readdir, rm } from 'node:fs/promises';
import path from 'node:path';
import ts from 'typescript';

// npm run build: the service compiled to JavaScript in dist/, which `npm start`
// runs. Node can run the TypeScript sources itself (npm run dev, the tests do),
// but its type stripper stays loaded for the life of the process: about 20 MiB
// of resident memory under load, and a feature Node 24 still marks as a
// release candidate (docs/performance.md). Compiled from the entries given,
// with the tsconfig's own settings; the files the routes read at run time
// (the dashboard's pages, the tracker script) are copied beside them.

const ROOT = path.resolve(import.meta.dirname, '..');
const ASSET = /\.(html|js|css)$/;

/** Compiles `entries` (paths from the repo root) and what they import into `outDir`, keeping the repo's layout. */
export async function build(outDir: string, entries: string[]): Promise<void> {
  const parsed = ts.getParsedCommandLineOfConfigFile(path.join(ROOT, 'tsconfig.json'), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
      throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
    },
  });
  if (!parsed) throw new Error('tsconfig.json could not be read');
  await rm(outDir, { recursive: true, force: true });
  const program = ts.createProgram(
    entries.map((entry) => path.join(ROOT, entry)),
    { ...parsed.options, noEmit: false, outDir, rootDir: ROOT },
  );
  const result = program.emit();
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...result.diagnostics];
  if (diagnostics.length > 0) {
    throw new Error(ts.formatDiagnostics(diagnostics, { getCanonicalFileName: (name) => name, getCurrentDirectory: () => ROOT, getNewLine: () => '\n' }));
  }
  for (const entry of await readdir(path.join(ROOT, 'src'), { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !ASSET.test(entry.name)) continue;
    const from = path.join(entry.parentPath, entry.name);
    await cp(from, path.join(outDir, path.relative(ROOT, from)));
  }
}

/** What `npm start` runs: the server, and the .env reader it preloads (`--import`), which the server does not import. */
export const SERVICE_ENTRIES = ['src/server.ts', 'scripts/env-file.ts'];

if (import.meta.main) {
  const outDir = path.join(ROOT, 'dist');
  await build(outDir, SERVICE_ENTRIES);
  console.log(`built ${path.relative(ROOT, outDir)}/src/server.js`);
}
