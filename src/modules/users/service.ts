import { isAuthApiError, isAuthWeakPasswordError } from '@supabase/supabase-js';
import type { FastifyBaseLogger } from 'fastify';
import { AppError, conflict, forbidden, internalError, notFound, validationFailed, withCause } from '../../lib/errors.ts';
import { type Caller, dbActorOf } from '../../plugins/auth.ts';
import type { Database, Tx } from '../../plugins/db.ts';
import { authRefusal, authServerFailure, isAuthServerError, type SupabaseAuth } from '../../plugins/supabase.ts';
import { canChangeUserEmail, canCreateUser, canRenameUser, canViewUser } from './permissions.ts';
import { getUserByEmail, getUserById, listUsers, updateUserName } from './queries.ts';
import type { CreateUserBody, ListUsersQuery, UpdateUserBody, User } from './schemas.ts';

// Accounts live in Supabase Auth; profiles (name, e-mail mirror, last login)
// in Postgres, kept in step by triggers on auth.users. Creating an account or
// changing its e-mail therefore goes through the auth server's admin API,
// while reads and renames are plain queries under the caller's rights. A
// rename is then written to the account's user_metadata too, so that the
// Supabase dashboard and the name in the user's next tokens agree with the
// profile (docs/accounts.md).

export const DUPLICATE_EMAIL = 'User with this email already exists';

const userNotFound = () => notFound('User not found');

/** What a failed call to the auth server's admin API means for the client. */
function authAdminError(error: unknown): AppError {
  const failed = authServerFailure(error);
  if (failed) return failed;
  if (isAuthWeakPasswordError(error)) return validationFailed({ password: [error.message] });
  if (isAuthApiError(error)) {
    if (error.code === 'email_exists' || error.code === 'user_already_exists' || error.status === 409) return conflict(DUPLICATE_EMAIL);
    if (error.code === 'user_not_found') return userNotFound();
    if (error.status === 400 || error.status === 422) return authRefusal(error);
  }
  return error instanceof AppError ? error : withCause(internalError(), error);
}

export function createUsersService({ db, supabase }: { db: Database; supabase: SupabaseAuth }) {
  const asCaller = <T>(caller: Caller, work: (tx: Tx) => Promise<T>) => db.asActor(dbActorOf(caller), work);
  /** One statement, read in one round trip (db.readAtOnceAsActor). */
  const readAsCaller = <T>(caller: Caller, work: (tx: Tx) => Promise<T>) => db.readAtOnceAsActor(dbActorOf(caller), work);

  async function getUser(caller: Caller, id: string): Promise<User> {
    if (!canViewUser(caller, id)) throw forbidden();
    const user = await readAsCaller(caller, (tx) => getUserById(tx, id));
    if (!user) throw userNotFound();
    return user;
  }

  async function findUserByEmail(caller: Caller, email: string): Promise<User> {
    const user = await readAsCaller(caller, (tx) => getUserByEmail(tx, email));
    if (!user) throw userNotFound();
    return user;
  }

  /**
   * After a failed call to the admin API: whether another account took
   * `email` at the same moment. The auth server's database refuses the second
   * of two requests for one address with a 500 ('Database error creating new
   * user') like any other failure, so the address being held now says which.
   */
  async function lostRaceFor(caller: Caller, email: string, error: unknown, ownId?: string): Promise<boolean> {
    if (!isAuthServerError(error)) return false;
    const holder = await readAsCaller(caller, (tx) => getUserByEmail(tx, email)).catch(() => undefined);
    return holder !== undefined && holder !== null && holder.id !== ownId;
  }

  async function createUser(caller: Caller, { email, password, name }: CreateUserBody): Promise<User> {
    if (!canCreateUser(caller)) throw forbidden();
    // Known duplicates are refused here; the auth server refuses the rest.
    if (await readAsCaller(caller, (tx) => getUserByEmail(tx, email))) throw conflict(DUPLICATE_EMAIL);
    const { data, error } = await supabase
      .admin()
      .auth.admin.createUser({ email, password, email_confirm: true, user_metadata: { name } })
      .catch((thrown: unknown) => ({ data: { user: null }, error: thrown }));
    if (error || !data.user) throw (await lostRaceFor(caller, email, error)) ? conflict(DUPLICATE_EMAIL) : authAdminError(error);
    // The trigger on auth.users has written the profile in the same transaction.
    return getUser(caller, data.user.id);
  }

  async function updateUser(caller: Caller, id: string, { name, email }: UpdateUserBody, log: FastifyBaseLogger): Promise<User> {
    if (!canRenameUser(caller, id)) throw forbidden();
    const current = await getUser(caller, id);
    // A front end that sends the whole profile back sends the address unchanged: that is no change to refuse.
    const changesEmail = email !== undefined && email.toLowerCase() !== current.email.toLowerCase();
    if (changesEmail && !canChangeUserEmail(caller)) throw forbidden('Only an admin may change an e-mail address');
    if (changesEmail) {
      const holder = await readAsCaller(caller, (tx) => getUserByEmail(tx, email));
      if (holder && holder.id !== id) throw conflict(DUPLICATE_EMAIL);
      const { error } = await supabase
        .admin()
        .auth.admin.updateUserById(id, { email, email_confirm: true })
        .catch((thrown: unknown) => ({ error: thrown }));
      if (error) throw (await lostRaceFor(caller, email, error, id)) ? conflict(DUPLICATE_EMAIL) : authAdminError(error);
    }
    if (name !== undefined && name !== current.name) {
      const renamed = await db.writeAtOnceAsActor(dbActorOf(caller), (tx) => updateUserName(tx, id, name));
      if (!renamed) throw userNotFound();
      await writeNameToAuthMetadata(id, name, log);
    }
    return getUser(caller, id);
  }

  /**
   * After the profile's rename, in a transaction of the auth server's own: the
   * metadata trigger then finds the profile already renamed, and of two
   * renames at the same moment (here and in the dashboard) the one whose
   * metadata is written last holds in both places (the trigger copies the
   * metadata's name to the profile) instead of the two disagreeing. The
   * rename has happened either way: a failure is logged.
   */
  async function writeNameToAuthMetadata(id: string, name: string, log: FastifyBaseLogger): Promise<void> {
    if (!supabase.canAdminister) return; // the start has warned about the missing service-role key
    const { error } = await supabase
      .admin()
      .auth.admin.updateUserById(id, { user_metadata: { name } })
      .catch((thrown: unknown) => ({ error: thrown }));
    if (error) {
      log.warn({ userId: id, err: error }, "renamed in the profile, but the auth server's user_metadata keeps the old name");
    }
  }

  async function listUsersWithRoles(caller: Caller, query: ListUsersQuery) {
    return asCaller(caller, (tx) => listUsers(tx, query));
  }

  return { getUser, findUserByEmail, createUser, updateUser, listUsersWithRoles };
}
