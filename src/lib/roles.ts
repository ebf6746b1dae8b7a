// The roles an account can be given (public.app_role), and which of them
// may read, write and delete websites and their analytics. Row-level
// security on public.websites says the same again.

export const APP_ROLES = ['admin', 'editor', 'viewer'] as const;
export type AppRole = (typeof APP_ROLES)[number];

export const WEBSITE_READERS: readonly AppRole[] = ['viewer', 'editor', 'admin'];
export const WEBSITE_WRITERS: readonly AppRole[] = ['editor', 'admin'];
export const WEBSITE_DELETERS: readonly AppRole[] = ['admin'];

/** Who may call a route, for its summary in the OpenAPI document: `viewer, editor or admin`. */
export const rolesInWords = (roles: readonly AppRole[]) => (roles.length > 1 ? `${roles.slice(0, -1).join(', ')} or ${roles.at(-1)}` : roles.join(''));
