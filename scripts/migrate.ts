import { ownerDatabaseUrl, ownerHint } from './owner-hint.ts';
import { applyMigrations, MigrationError } from './stack/database.ts';

// `npm run migrate`: applies supabase/migrations as the owner, to
// DATABASE_OWNER_URL (or DATABASE_URL when that is the owner's; with neither,
// `npm run dev`'s local database, saying so, as grant-role does), each in a
// transaction of its own; a failure is one line naming the migration. Recording
// them where the Supabase CLI does, and first checking what is recorded against
// the files: an applied migration edited, renamed or gone, or a new one older
// than the newest applied, stops the run before it applies anything (one line
// too). For a hosted project `supabase db push` does the same from the CLI.
// The API itself logs in with less (README, Least privilege).

const url = ownerDatabaseUrl();
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
