// The same database under another login: the local stack and the tests
// connect the API as `authenticator` (the login role that can only switch to
// anon, authenticated and service_role) and run migrations as the owner.

export function asLoginRole(url: string, role = 'authenticator'): string {
  const parsed = new URL(url);
  parsed.username = role;
  parsed.password = '';
  return parsed.toString();
}
