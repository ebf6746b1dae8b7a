import { z } from 'zod';
import { requiredString } from '../../../lib/schemas.ts';

// Shapes of the dashboard's own routes (hidden from the OpenAPI document).

export const SignInBodySchema = z.object({
  email: requiredString('Email').trim().min(1).max(254),
  password: requiredString('Password').min(1).max(1024),
});
export const AssetParamsSchema = z.object({ file: z.string() });
