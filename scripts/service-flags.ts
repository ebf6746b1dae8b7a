import { readFileSync } from 'node:fs';
import path from 'node:path';

// The V8 flags `npm start` gives the service (package.json), so the processes
// that stand in for it (npm run dev, the benchmarks' servers) run with the
// same heap settings as production does.
export function serviceNodeFlags(): string[] {
  const manifest = JSON.parse(readFileSync(path.join(import.meta.dirname, '..', 'package.json'), 'utf8')) as { scripts: { start: string } };
  return manifest.scripts.start.split(/\s+/).filter((token) => /^--max-[a-z-]+=\d+$/.test(token));
}
