import { ownerHint } from './owner-hint.ts';
import { scriptSettings } from './settings.ts';
import { applyMigrations, MigrationError } from './stack/database.ts';

// `npm run migrate`: applies supabase/migrations as the owner, to
// DATABASE_OWNER_URL (or DATABASE_URL when that is the owner's), each in a
// transaction of its own; a failure is one line naming the migration. Recording
// them where the Supabase CLI does, and first checking what is recorded against
// the files: an applied migration edited, renamed or gone, or a new one older
// than the newest applied, stops the run before it applies anything (one line
// too). For a hosted project `supabase db push` does the same from the CLI.
// The API itself logs in with less (README, Least privilege).

const settings = scriptSettings(['DATABASE_OWNER_URL', 'DATABASE_URL']);
const url = settings.DATABASE_OWNER_URL ?? settings.DATABASE_URL;
if (!url) {
  console.error('DATABASE_OWNER_URL (or DATABASE_URL) is not set.');
  process.exit(2);
}
try {
  const applied = await applyMigrations(url);
  console.log(applied.length ? `applied:\n  ${applied.join('\n  ')}` : 'database is up to date');
} catch (error) {
  // One line a developer can act on, not a driver's stack trace.
  const message = error instanceof Error ? error.message : String(error);
  const applied = error instanceof MigrationError && error.applied.length ? ` (applied before it: ${error.applied.join(', ')})` : '';
  console.error(`npm run migrate: ${message}${applied}${ownerHint(error, 'migrations need')}`);
  process.exit(1);
}
