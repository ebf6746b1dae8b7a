import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { signLegacyAdminToken } from '../src/lib/tokens.ts';
import { scriptSettings } from './settings.ts';

// `npm run admin-token -- <userId>`: prints a legacy admin token (SPEC 5.5),
// signed with ADMIN_JWT_SECRET from the environment or .env, else, when no
// SUPABASE_URL names a hosted project, with the local stack's secret that
// `npm run dev` keeps in .cache/dev-secrets.json and gives the API. Against a
// hosted project dev gives the API only what .env holds, so a token signed
// with the local secret would be refused there. Which secret signed goes to
// stderr, so the token alone goes to stdout.

const DEV_SECRETS = path.resolve(import.meta.dirname, '../.cache/dev-secrets.json');

async function adminSecret(): Promise<{ secret: string; from: string } | undefined> {
  const { ADMIN_JWT_SECRET, SUPABASE_URL } = scriptSettings(['ADMIN_JWT_SECRET', 'SUPABASE_URL']);
  if (ADMIN_JWT_SECRET) return { secret: ADMIN_JWT_SECRET, from: 'ADMIN_JWT_SECRET' };
  if (SUPABASE_URL) return undefined;
  try {
    const secret = JSON.parse(await readFile(DEV_SECRETS, 'utf8')).ADMIN_JWT_SECRET;
    return typeof secret === 'string' && secret ? { secret, from: "the local stack's ADMIN_JWT_SECRET (.cache/dev-secrets.json)" } : undefined;
  } catch {
    return undefined;
  }
}

const userId = process.argv[2];
if (!userId) {
  console.error('usage: npm run admin-token -- <userId>');
  process.exit(2);
}
const signing = await adminSecret();
if (!signing) {
  console.error('ADMIN_JWT_SECRET is not set: put it in .env (the server must have the same one), or, without SUPABASE_URL, run `npm run dev` once to create the local secrets.');
  process.exit(2);
}
console.error(`signed with ${signing.from}; valid for 24 hours`);
console.log(await signLegacyAdminToken(signing.secret, userId));
