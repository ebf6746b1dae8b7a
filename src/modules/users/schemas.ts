import { z } from 'zod';
import { APP_ROLES } from '../../plugins/auth.ts';
import { EmailSchema, NameSchema, PasswordSchema } from '../auth/schemas.ts';

// Shapes of /api/users. A user here is the profile (public.profiles) with
// the roles assigned in user_roles; the implicit `user` role is not listed.

const timestamp = z.iso.datetime();

export const UserSchema = z.object({
  id: z.uuid(),
  email: z.string(),
  name: z.string(),
  createdAt: timestamp,
  lastLogin: timestamp.nullable(),
  roles: z.array(z.enum(APP_ROLES)),
});

export const UserIdParamsSchema = z.object({ id: z.uuid({ error: 'User id must be a UUID' }) });
export const UserEmailParamsSchema = z.object({ email: EmailSchema });

export const CreateUserBodySchema = z.object({ email: EmailSchema, password: PasswordSchema, name: NameSchema });

export const UpdateUserBodySchema = z
  .object({ name: NameSchema.optional(), email: EmailSchema.optional() })
  .refine((body) => body.name !== undefined || body.email !== undefined, { error: 'Give a name or an email to change' });

export const UserResponseSchema = z.object({ success: z.literal(true), message: z.string().optional(), data: UserSchema });

export const PaginationSchema = z.object({ total: z.number().int(), limit: z.number().int(), offset: z.number().int() });

const limit = z.coerce
  .number({ error: 'Limit must be an integer from 1 to 100' })
  .int('Limit must be an integer from 1 to 100')
  .min(1, 'Limit must be an integer from 1 to 100')
  .max(100, 'Limit must be an integer from 1 to 100')
  .default(20);
const offset = z.coerce
  .number({ error: 'Offset must be a non-negative integer' })
  .int('Offset must be a non-negative integer')
  .min(0, 'Offset must be a non-negative integer')
  .max(1_000_000, 'Offset must be at most 1000000')
  .default(0);

export const ListUsersQuerySchema = z.object({ search: z.string().trim().max(200).optional(), limit, offset });

export type User = z.infer<typeof UserSchema>;
export type CreateUserBody = z.infer<typeof CreateUserBodySchema>;
export type UpdateUserBody = z.infer<typeof UpdateUserBodySchema>;
export type ListUsersQuery = z.infer<typeof ListUsersQuerySchema>;
