import type { AppRole, Caller } from '../../plugins/auth.ts';

// Who may do what with websites. Route guards use the role lists; row-level
// security on public.websites (migration 20261121000300) says the same again.

export const WEBSITE_READERS: AppRole[] = ['viewer', 'editor', 'admin'];
export const WEBSITE_WRITERS: AppRole[] = ['editor', 'admin'];
export const WEBSITE_DELETERS: AppRole[] = ['admin'];

/** Viewers, editors and admins (and the legacy admin token) see every website. */
export function canViewWebsites(caller: Caller | null): boolean {
  return caller !== null && caller.roles.some((role) => WEBSITE_READERS.includes(role));
}
