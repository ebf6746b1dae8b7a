import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { scriptSettings } from './settings.ts';

// `npm run admin-token -- <userId>`: prints a legacy admin token (SPEC 5.5),
// signed with ADMIN_JWT_SECRET from the environment or .env, else with the
// local stack's secret that `npm run dev` keeps in .cache/dev-secrets.json.

async function adminSecret(): Promise<string | undefined> {
  const { ADMIN_JWT_SECRET } = scriptSettings(['ADMIN_JWT_SECRET']);
  if (ADMIN_JWT_SECRET) return ADMIN_JWT_SECRET;
  try {
    const file = path.resolve(import.meta.dirname, '../.cache/dev-secrets.json');
    return JSON.parse(await readFile(file, 'utf8')).ADMIN_JWT_SECRET;
  } catch {
    return undefined;
  }
}

const userId = process.argv[2];
if (!userId) {
  console.error('usage: npm run admin-token -- <userId>');
  process.exit(2);
}
const secret = await adminSecret();
if (!secret) {
  console.error('ADMIN_JWT_SECRET is not set: put it in .env, or run `npm run dev` once to create the local secrets.');
  process.exit(2);
}
console.log(await signLegacyAdminToken(secret, userId));
