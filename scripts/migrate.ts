import { applyMigrations } from './stack/database.ts';

// `npm run migrate`: applies supabase/migrations to DATABASE_URL, recording
// them where the Supabase CLI does. For a hosted project `supabase db push`
// does the same from the CLI.

const url = process.env.DATABASE_URL;
if (!url) {
  console.error('DATABASE_URL is not set.');
  process.exit(2);
}
const applied = await applyMigrations(url);
console.log(applied.length ? `applied:\n  ${applied.join('\n  ')}` : 'database is up to date');
