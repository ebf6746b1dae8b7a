import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Caller } from '../../plugins/auth.ts';

// Who may do what with users and their roles. Route guards and services ask
// these; row-level security (profiles, user_roles) enforces the same again.

export const isAdmin = (caller: Caller): boolean => caller.roles.includes('admin');

export const canViewUser = (caller: Caller, userId: string): boolean => caller.userId === userId || isAdmin(caller);
export const canRenameUser = canViewUser;
export const canChangeUserEmail = (caller: Caller): boolean => isAdmin(caller);
export const canCreateUser = isAdmin;
export const canViewUserRoles = canViewUser;
export const canSetUserRoles = isAdmin;

/** How a caller is named in the role-change record when it has no auth.users id of its own. */
export const actorLabel = (caller: Caller): string =>
  caller.kind === 'legacy-admin' ? `legacy-admin:${caller.userId}` : caller.userId;

/** Guard for routes open to any authenticated caller (a user session or the legacy admin token); 401 otherwise. */
export function requireCaller(app: FastifyInstance) {
  return async function requireCaller(request: FastifyRequest) {
    await app.authenticate(request);
  };
}

/** The caller a guard has established; routes behind a guard always have one. */
export function callerOf(request: FastifyRequest): Caller {
  if (!request.caller) throw new Error('route has no auth guard');
  return request.caller;
}
