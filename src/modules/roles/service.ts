import type { FastifyBaseLogger } from 'fastify';
import { conflict, constraintOf, errorCode, forbidden, notFound } from '../../lib/errors.ts';
import type { AppRole } from '../../lib/roles.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database } from '../../plugins/db.ts';
import { canSetUserRoles, canViewUserRoles, changedByLabel } from './permissions.ts';
import { getUserRoles, replaceUserRoles, adminAndUserCheck, userExists } from './queries.ts';
import type { UserRoles } from './schemas.ts';

// SQLSTATE raised by the last-admin trigger (PostgREST's convention: PT + HTTP status).
const LAST_ADMIN = 'PT409';

export function createRolesService({ db }: { db: Database }) {
  async function getRoles(caller: Caller, userId: string): Promise<UserRoles> {
    if (!canViewUserRoles(caller, userId)) throw forbidden();
    // Both reads at once, one round trip (db.readAtOnceAsActor); no roles for a user who is not there.
    // Another user's roles: the caller's admin role is asked in the same snapshot, so an admin
    // revoked since the guard read it is told 403, not that the user it no longer sees is not there.
    const own = caller.userId === userId;
    return db.readAtOnceAsActor(dbActorOf(caller), async (tx) => {
      const [{ callerIsAdmin, userFound }, roles] = await Promise.all([
        own ? userExists(tx, userId).then((found) => ({ callerIsAdmin: false, userFound: found })) : adminAndUserCheck(tx, userId),
        getUserRoles(tx, userId),
      ]);
      if (!own && !callerIsAdmin) throw forbidden();
      if (!userFound) throw notFound('User not found');
      return { userId, roles };
    });
  }

  /** Replaces the assigned set in one transaction; the change is recorded in role_changes and logged. */
  async function setRoles(caller: Caller, userId: string, wanted: AppRole[], log: FastifyBaseLogger): Promise<UserRoles> {
    if (!canSetUserRoles(caller)) throw forbidden();
    const roles = [...new Set(wanted)];
    try {
      // The caller's admin role is asked again in the database, as it may have
      // been revoked since the guard read it: row-level security would then
      // hide the rows, and the change would be made in part or not at all.
      const { granted, revoked, roles: after } = await db.asActor(dbActorOf(caller), async (tx) => {
        const { callerIsAdmin, userFound } = await adminAndUserCheck(tx, userId);
        if (!callerIsAdmin) throw forbidden();
        if (!userFound) throw notFound('User not found');
        const change = await replaceUserRoles(tx, userId, roles, changedByLabel(caller));
        if (!change) throw forbidden();
        return change;
      });
      if (granted.length > 0 || revoked.length > 0) {
        log.info({ changedBy: changedByLabel(caller), userId, granted, revoked, roles: after }, 'user roles changed');
      }
      return { userId, roles: after };
    } catch (error) {
      if (errorCode(error) === LAST_ADMIN) throw conflict('Cannot remove the last admin');
      // The account was deleted after adminAndUserCheck saw it, before the grant's foreign-key check.
      if (constraintOf(error) === 'user_roles_user_id_fkey') throw notFound('User not found');
      throw error;
    }
  }

  return { getRoles, setRoles };
}
