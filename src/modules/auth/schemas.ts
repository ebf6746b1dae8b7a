import { z } from 'zod';
import { EmailSchema, NameSchema, PasswordSchema, requiredString } from '../../lib/schemas.ts';
import { documentedAs } from '../../lib/documented-as.ts';

// Request and response shapes of /api/auth (SPEC section 4). Some SPEC
// errors carry their own message instead of `Validation failed` (sign in
// without e-mail or password, reset without e-mail): those fields are
// optional here (null counts as missing) and the routes answer for them.
// The OpenAPI document shows the contract instead (documentedAs): the fields
// required, as strings.

/** A field the route answers for itself when missing (null counts as missing); a wrong type or length is named here. */
const fieldOrMissing = (label: string, max: number) =>
  z.string({ error: `${label} must be a string` }).max(max, { error: `${label} must be at most ${max} characters` }).nullish();

export const SignUpBodySchema = z.object({
  email: EmailSchema,
  password: PasswordSchema,
  name: NameSchema,
});
export const SignInBodySchema = documentedAs(
  z.object({ email: fieldOrMissing('Email', 254), password: fieldOrMissing('Password', 1024) }),
  z
    .object({ email: z.string().min(1).max(254), password: z.string().min(1).max(1024) })
    .meta({ description: 'A missing, null or empty field is answered 400 `Email and password are required`' }),
);
export const RefreshBodySchema = z.object({ refreshToken: requiredString('Refresh token').min(1).max(4096) });
export const ResetPasswordBodySchema = documentedAs(
  z.object({ email: fieldOrMissing('Email', 254) }),
  z.object({ email: z.email().max(254) }).meta({ description: 'A missing, null or empty e-mail is answered 400 `Email is required`' }),
);
export const UpdatePasswordBodySchema = documentedAs(
  z.object({ token: fieldOrMissing('Token', 4096), newPassword: fieldOrMissing('New password', 1024) }),
  z
    .object({
      token: z
        .string()
        .min(1)
        .max(4096)
        .meta({ description: 'The token hash from the reset e-mail; a missing or spent one is 400 `Invalid or expired reset token`' }),
      newPassword: PasswordSchema,
    })
    .meta({
      description:
        'The new password is checked first (400 with `details.newPassword`: `New password is required` when missing, null or empty), before the token is redeemed',
    }),
);
export const LinkBodySchema = z.object({
  provider: requiredString('Provider').min(1).max(64),
  token: requiredString('Token').min(1).max(16_384),
  // The raw nonce whose SHA-256 the front end put in the provider's request:
  // the auth server refuses an id token carrying a nonce without it.
  nonce: requiredString('Nonce').min(1, 'Nonce must not be empty').max(512).optional(),
});

export const SessionSchema = z.object({
  accessToken: z.string(),
  refreshToken: z.string(),
  expiresIn: z.number().int(),
  tokenType: z.string(),
});

/** ISO 8601 in UTC with milliseconds (supabase-answers.ts isoTimestamp, Date.toISOString), or null. */
const timestamp = z.iso.datetime().nullable();

export const SignUpResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({
    user: z.object({ id: z.uuid(), email: z.string(), name: z.string(), createdAt: timestamp }),
    session: SessionSchema.nullable(),
  }),
});

export const SignInResponseSchema = z.object({
  success: z.literal(true),
  message: z.string(),
  data: z.object({
    user: z.object({ id: z.uuid(), email: z.string(), name: z.string(), lastLogin: timestamp }),
    session: SessionSchema,
  }),
});

export const RefreshResponseSchema = z.object({ success: z.literal(true), message: z.string(), data: z.object({ session: SessionSchema }) });
export const MeResponseSchema = z.object({
  success: z.literal(true),
  data: z.object({
    id: z.uuid(),
    email: z.string(),
    name: z.string(),
    createdAt: timestamp,
    lastLogin: timestamp,
    roles: z.array(z.string()),
  }),
});

export type Session = z.infer<typeof SessionSchema>;
