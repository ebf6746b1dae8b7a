import { ownerDatabaseUrl, ownerHint } from './owner-hint.ts';
import { applyMigrations, MigrationError } from './stack/database.ts';

// `npm run migrate`: applies supabase/migrations as the owner, to
// DATABASE_OWNER_URL (or DATABASE_URL when that is the owner's; with neither,
// `npm run dev`'s local database, saying so, as grant-role does), each in a
// transaction of its own; a failure is one line naming the migration. Recording
// them where the Supabase CLI does, and first checking what is recorded against
// the files: an applied migration edited, renamed or gone, or a new one older
// than the newest applied, stops the run before it applies anything (one line
// too); for a hosted project `supabase db push` does the same from the CLI.
// A database that has every file and more, all newer than the files, was
// migrated by a later release: a rollback's `migrate` says so and succeeds,
// so a pipeline that runs it before the start can redeploy the earlier build.
// The API itself logs in with less (README, Least privilege).

const url = await ownerDatabaseUrl();
try {
  let ahead: readonly string[] = [];
  const applied = await applyMigrations(url, { onAhead: (newer) => (ahead = newer) });
  if (ahead.length > 0) {
    const count = `${ahead.length} migration${ahead.length === 1 ? '' : 's'}`;
    console.log(`database is ahead of this release: it has ${count} newer than its files (newest ${ahead.at(-1)}); nothing applied`);
  } else {
    console.log(applied.length ? `applied:\n  ${applied.join('\n  ')}` : 'database is up to date');
  }
} catch (error) {
  // One line a developer can act on, not a driver's stack trace.
  const message = error instanceof Error ? error.message : String(error);
  const applied = error instanceof MigrationError && error.applied.length ? ` (applied before it: ${error.applied.join(', ')})` : '';
  console.error(`npm run migrate: ${message}${applied}${ownerHint(error, 'migrations need')}`);
  process.exit(1);
}
