import type { ElevatedSql, Tx } from '../../plugins/db.ts';

// The auth module's own reads of the mirrored profiles (accounts themselves are the auth server's).

export interface ProfileRow {
  id: string;
  email: string;
  name: string;
  created_at: Date;
  last_login: Date | null;
}

/** The caller's own profile, under row-level security. */
export async function getProfile(tx: Tx, userId: string): Promise<ProfileRow | undefined> {
  const [row] = await tx<ProfileRow[]>`select id, email, name, created_at, last_login from public.profiles where id = ${userId}`;
  return row;
}

/** Elevated: a password reset's caller is anonymous and profiles are private. Pending, so the service can bound it. */
export function selectProfileByEmailElevated(sql: ElevatedSql, email: string) {
  return sql`select 1 from public.profiles where lower(email) = lower(${email}) limit 1`;
}

/** Elevated: the name a user just signed in under is read before the caller holds a token of ours. Pending, so the service can bound it. */
export function selectProfileNameElevated(sql: ElevatedSql, userId: string) {
  return sql<{ name: string }[]>`select name from public.profiles where id = ${userId}`;
}

/** Elevated: ends one session of a user (public.end_session), for a sign-out whose token has expired; whether there was one. Pending, so the service can bound it. */
export function endSessionElevated(sql: ElevatedSql, userId: string, sessionId: string) {
  return sql<{ ended: boolean }[]>`select public.end_session(${userId}::uuid, ${sessionId}::uuid) as ended`;
}

/** Elevated: ends the session a refresh token belongs to (public.end_session_of_refresh_token), when the auth server finds the token reused; the session's id, or null. Pending, so the service can bound it. */
export function endSessionOfRefreshTokenElevated(sql: ElevatedSql, refreshToken: string) {
  return sql<{ session: string | null }[]>`select public.end_session_of_refresh_token(${refreshToken}) as session`;
}

/** Elevated: ends every session of a user (public.end_all_sessions), when the auth server failed to after a password reset; how many there were. Pending, so the service can bound it. */
export function endAllSessionsElevated(sql: ElevatedSql, userId: string) {
  return sql<{ ended: number }[]>`select public.end_all_sessions(${userId}::uuid) as ended`;
}
