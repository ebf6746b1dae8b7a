import type { FastifyBaseLogger } from 'fastify';
import { decodeJwt } from 'jose';
import { forbidden, unauthorized } from '../../../lib/errors.ts';
import { dbActorOfUser } from '../../../plugins/auth.ts';
import type { Database } from '../../../plugins/db.ts';
import { authRateLimit, authServerFailure, type SupabaseAuth } from '../../../plugins/supabase.ts';
import { endSessionElevated } from '../../auth/queries.ts';
import { holdsAdminRole } from './queries.ts';

// The dashboard's own sign-in: e-mail and password through the auth server,
// kept only when the account holds the admin role; and its sign-out, which
// ends the session at the auth server (or, when it cannot, in the database)
// and in this instance's session cache.

function sessionIdOf(accessToken: string): string | undefined {
  try {
    const { session_id: sessionId } = decodeJwt(accessToken);
    return typeof sessionId === 'string' ? sessionId : undefined;
  } catch {
    return undefined;
  }
}

/** What the page says to a signed-in account without the admin role, on the sign-in form and in the sign-in answer alike. */
export const NOT_AN_ADMIN = 'This account is not an administrator.';

export interface StatusSessionDeps {
  supabase: SupabaseAuth;
  db: Database;
  forgetSession(sessionId: string): void;
  /** The user and session a token names, its signature checked but not its expiry; null for a token not ours. */
  sessionOfToken(token: string, log: FastifyBaseLogger): Promise<{ userId: string; sessionId: string } | null>;
}

export function createStatusSessionService(deps: StatusSessionDeps) {
  const { supabase, db } = deps;

  /** Signs an admin in; 401 for wrong credentials, 429 when the auth server limits the address, 403 (and the session ended) for an account without the role. */
  async function signInAdmin(ip: string, email: string, password: string): Promise<{ accessToken: string; expiresIn: number }> {
    const client = supabase.forRequest(ip);
    const { data, error } = await client.auth.signInWithPassword({ email, password });
    if (error || !data.session) {
      throw authServerFailure(error) ?? authRateLimit(error) ?? unauthorized('Invalid email or password');
    }
    const { session } = data;
    // The session is ended unless it is handed over: its refresh token is not
    // kept, so nobody else could ever end it.
    const endSession = () => client.auth.admin.signOut(session.access_token, 'local').catch(() => {});
    const isAdmin = await db.readAtOnceAsActor(dbActorOfUser(session.user.id), holdsAdminRole).catch(async (error: unknown) => {
      await endSession();
      throw error;
    });
    if (!isAdmin) {
      await endSession();
      throw forbidden(NOT_AN_ADMIN);
    }
    return { accessToken: session.access_token, expiresIn: session.expires_in };
  }

  /**
   * Ends the session behind a dashboard cookie, so a copied cookie stops
   * working at once. When the auth server does not end it (it is down, or the
   * token has expired), the session the token names, its signature checked,
   * is ended in the database, as /api/auth/signout does; when that fails too,
   * the error (503) reaches the page, which says it is not signed out.
   */
  async function signOut(ip: string, accessToken: string, log: FastifyBaseLogger): Promise<void> {
    if (!supabase.configured) return;
    const { error } = await supabase.forRequest(ip).auth.admin.signOut(accessToken, 'local');
    if (error) {
      log.warn({ error: error.message }, 'status sign-out: the auth server did not end the session; ending it in the database');
      const session = await deps.sessionOfToken(accessToken, log);
      if (session) await db.bounded(endSessionElevated(db.sql, session.userId, session.sessionId));
    }
    // Forgetting needs no verified token: it only makes the next use check auth.sessions again.
    const sessionId = sessionIdOf(accessToken);
    if (sessionId) deps.forgetSession(sessionId);
  }

  return { signInAdmin, signOut };
}
