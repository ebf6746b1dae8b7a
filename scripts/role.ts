import { connectPostgres } from '../src/lib/database-url.ts';
import { APP_ROLES } from '../src/lib/roles.ts';
import { ownerDatabaseUrl, ownerHint } from './owner-hint.ts';

// `npm run grant-role -- <email> <role>` and `npm run revoke-role -- <email>
// <role>`: give an existing account admin, editor or viewer, or take it back.
// Granting is how the first admin is made; revoking is how a grant to the
// wrong account is undone before any admin can sign in to do it through the
// API. A failure is one line, as migrate's.

const [action, email, role] = process.argv.slice(2);
const command = `${action}-role`;
const ROLES: readonly string[] = APP_ROLES;
if ((action !== 'grant' && action !== 'revoke') || !email || !role || !ROLES.includes(role)) {
  console.error(`usage: npm run ${action === 'revoke' ? 'revoke-role' : 'grant-role'} -- <email> <${ROLES.join('|')}>`);
  process.exit(2);
}
// An operator's tool: it writes as the owner, not as the API's login role.
const url = await ownerDatabaseUrl();
const sql = connectPostgres(url, { max: 1, onnotice: () => {} });
try {
  const profiles = await sql`select id, created_at, last_login from public.profiles where lower(email) = lower(${email}) order by created_at`;
  const [profile] = profiles;
  if (!profile) {
    console.error(`No user with e-mail ${email} in ${new URL(url).pathname.slice(1)}.`);
    process.exitCode = 1;
  } else if (profiles.length > 1) {
    // Accounts made through single sign-on may share an address with another;
    // the role must not land on whichever the database returned first.
    console.error(
      `${profiles.length} accounts have e-mail ${email} (${profiles.map((row) => row.id).join(', ')}); ` +
        'none changed: give the role to the one meant through the API (POST /api/userRoles/:userId).',
    );
    process.exitCode = 1;
  } else {
    if (action === 'grant') {
      await sql`insert into public.user_roles (user_id, role) values (${profile.id}, ${role}::public.app_role) on conflict do nothing`;
    } else {
      // The database refuses to take the admin role from the last admin (protect_last_admin).
      await sql`delete from public.user_roles where user_id = ${profile.id} and role = ${role}::public.app_role`;
    }
    const roles = await sql`select role from public.user_roles where user_id = ${profile.id} order by role`;
    console.log(`${email} (${profile.id}) now has: ${roles.length ? roles.map((row) => row.role).join(', ') : 'no role'}`);
    if (action === 'grant') {
      // Anyone may sign up with any address (confirmation is off in the local
      // stack's Supabase Auth): the operator checks this is the account they made.
      const when = (value: Date | null) => (value ? value.toISOString() : 'never');
      console.log(
        `The account was made ${when(profile.created_at)} and last signed in ${when(profile.last_login)}; ` +
          `if you did not make it then: npm run revoke-role -- ${email} ${role}`,
      );
    }
  }
} catch (error) {
  // One line an operator can act on, not a driver's stack trace.
  const message = error instanceof Error ? error.message : String(error);
  console.error(`npm run ${command}: ${message}${ownerHint(error, `${command} needs`)}`);
  process.exitCode = 1;
} finally {
  await sql.end();
}
