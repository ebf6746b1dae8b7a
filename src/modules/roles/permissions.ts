import { type Caller, isAdmin } from '../../plugins/auth.ts';

// Who may read and change role assignments. Services ask these; row-level
// security (user_roles) enforces the same again.
// Ids from requests arrive lower-cased (uuidInput), as token subjects are,
// so plain equality tells the caller's own id.

export const canViewUserRoles = (caller: Caller, userId: string): boolean => caller.userId === userId || isAdmin(caller);
export const canSetUserRoles = isAdmin;

/** How the caller is named in the role-change record (the legacy admin token has no auth.users id of its own). */
export const changedByLabel = (caller: Caller): string => (caller.kind === 'legacy-admin' ? `legacy-admin:${caller.userId}` : caller.userId);
