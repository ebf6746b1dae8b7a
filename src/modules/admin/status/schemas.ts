import { z } from 'zod';

// Shapes of the dashboard's own routes (hidden from the OpenAPI document).

export const SignInBodySchema = z.object({ email: z.string().trim().min(1).max(254), password: z.string().min(1).max(1024) });
export const AssetParamsSchema = z.object({ file: z.string() });
