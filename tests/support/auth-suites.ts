// The suites that need a real Supabase Auth server. Without one (see
// SUPABASE_AUTH_BIN in the README) they do not run, and `npm test` says so
// in one line naming them.

export const AUTH_SUITES = [
  'tests/auth-flows.test.ts',
  'tests/auth-confirmations.test.ts',
  'tests/auth-outage.test.ts',
  'tests/auth-roles.test.ts',
  'tests/auth-refresh-race.test.ts',
  'the reset tokens of tests/auth-update-password.test.ts',
  'the Supabase dashboard actions of tests/dashboard-admin.test.ts',
  'the dashboard sign-in of tests/admin-status.test.ts',
  'the real sessions of tests/feedback-item.test.ts',
  'the banned admin of tests/feedback-outbox.test.ts',
  'the real sessions of tests/users.test.ts',
  'the session functions of tests/migrations-hosted-roles.test.ts',
  'the auth server\'s e-mail rule in tests/text-forms.test.ts',
];
