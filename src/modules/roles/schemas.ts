import { z } from 'zod';
import { APP_ROLES } from '../../lib/roles.ts';
import { uuidInput } from '../../lib/schemas.ts';

// Shapes of /api/userRoles: a user's assigned roles, and the set that
// replaces them. The implicit `user` role is not assignable.

export const UserRolesParamsSchema = z.object({ userId: uuidInput('User id') });

// Repeats are tolerated (the service keeps one of each) up to twice the
// roles there are; a longer list is a client's mistake, not a set of roles.
const ROLES_MAX_ENTRIES = APP_ROLES.length * 2;

export const SetUserRolesBodySchema = z.object({
  roles: z
    .array(z.enum(APP_ROLES, { error: `Role must be one of: ${APP_ROLES.join(', ')}` }), { error: 'Roles must be an array' })
    .max(ROLES_MAX_ENTRIES, `Roles must list at most ${ROLES_MAX_ENTRIES} entries`),
});

export const UserRolesSchema = z.object({ userId: z.uuid(), roles: z.array(z.enum(APP_ROLES)) });

export const UserRolesResponseSchema = z.object({ success: z.literal(true), message: z.string().optional(), data: UserRolesSchema });

export type UserRoles = z.infer<typeof UserRolesSchema>;
