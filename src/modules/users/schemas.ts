import { z } from 'zod';
import {
  EmailSchema,
  isStorableText,
  NameSchema,
  PaginationQuerySchema,
  PaginationSchema,
  PasswordSchema,
  requiredString,
  uuidInput,
} from '../../lib/schemas.ts';
import { APP_ROLES } from '../../lib/roles.ts';

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

export const UserIdParamsSchema = z.object({ id: uuidInput('User id') });
export const UserEmailParamsSchema = z.object({ email: EmailSchema });

export const CreateUserBodySchema = z.object({ email: EmailSchema, password: PasswordSchema, name: NameSchema });

export const UpdateUserBodySchema = z
  .object({ name: NameSchema.optional(), email: EmailSchema.optional() })
  .refine((body) => body.name !== undefined || body.email !== undefined, { error: 'Give a name or an email to change' })
  // The rule above, in the document: a refine has no JSON Schema form.
  .meta({ anyOf: [{ required: ['name'] }, { required: ['email'] }] });

export const UserResponseSchema = z.object({ success: z.literal(true), message: z.string().optional(), data: UserSchema });

export const ListUsersQuerySchema = PaginationQuerySchema.extend({
  search: requiredString('Search')
    .trim()
    .max(200, 'Search must be at most 200 characters')
    .refine(isStorableText, 'Search must not contain NUL characters or unpaired surrogates')
    .meta({ description: 'Part of a name or e-mail. Trimmed of leading and trailing white space first; at most 200 characters after that' })
    .optional(),
});
export const UsersResponseSchema = z.object({ success: z.literal(true), data: z.array(UserSchema), pagination: PaginationSchema });

export type User = z.infer<typeof UserSchema>;
export type CreateUserBody = z.infer<typeof CreateUserBodySchema>;
export type UpdateUserBody = z.infer<typeof UpdateUserBodySchema>;
export type ListUsersQuery = z.infer<typeof ListUsersQuerySchema>;
