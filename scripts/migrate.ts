import { scriptSettings } from './settings.ts';
import { applyMigrations } from './stack/database.ts';

// `npm run migrate`: applies supabase/migrations as the owner, to
// DATABASE_OWNER_URL (or DATABASE_URL when that is the owner's), recording
// them where the Supabase CLI does. For a hosted project `supabase db push`
// does the same from the CLI. The API itself logs in with less (README, Least privilege).

const settings = scriptSettings(['DATABASE_OWNER_URL', 'DATABASE_URL']);
const url = settings.DATABASE_OWNER_URL ?? settings.DATABASE_URL;
if (!url) {
  console.error('DATABASE_OWNER_URL (or DATABASE_URL) is not set.');
  process.exit(2);
}
const applied = await applyMigrations(url);
console.log(applied.length ? `applied:\n  ${applied.join('\n  ')}` : 'database is up to date');
