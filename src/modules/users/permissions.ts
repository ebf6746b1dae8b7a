import { type Caller, isAdmin } from '../../plugins/auth.ts';

// Who may do what with users. Route guards and services ask these; row-level
// security (profiles) enforces the same again.
// Ids from requests arrive lower-cased (uuidInput), as token subjects are,
// so plain equality tells the caller's own id.

export const canViewUser = (caller: Caller, userId: string): boolean => caller.userId === userId || isAdmin(caller);
export const canRenameUser = canViewUser;
export const canChangeUserEmail = (caller: Caller): boolean => isAdmin(caller);
export const canCreateUser = isAdmin;
