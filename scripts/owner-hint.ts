// The scripts that write as the schema's owner (migrate, grant-role) end a
// refusal for want of its rights with what to set: the usual cause is a .env
// whose DATABASE_URL is the API's login role and no DATABASE_OWNER_URL.

/** Postgres refused for want of rights (SQLSTATE 42501: permission denied, must be owner), itself or as a cause. */
function lacksRights(error: unknown): boolean {
  for (let cause = error; cause instanceof Error; cause = cause.cause) {
    if ((cause as { code?: unknown }).code === '42501') return true;
  }
  return false;
}

/** The end of a script's one error line: what to set when `error` is such a refusal, else nothing. `needs`: "migrations need". */
export function ownerHint(error: unknown, needs: string): string {
  return lacksRights(error) ? `; ${needs} the owner: set DATABASE_OWNER_URL (DATABASE_URL is the API's login role)` : '';
}
