import { readDotEnv } from '../dot-env.ts';

export const AUTH_BIN_VARIABLE = 'SUPABASE_AUTH_BIN';
export const LOCAL_POSTGRES_VARIABLE = 'LOCAL_POSTGRES_URL';

/**
 * The settings the local stack takes from the developer's machine (its
 * PostgreSQL server, its Supabase Auth binary): from the environment, else
 * from .env. `npm run dev` has .env loaded already; `npm test` and the
 * benchmarks load none (the servers they start must not take a developer's
 * other settings, a hosted project's DATABASE_URL among them), so a binary
 * named only in .env was not found and the auth suites quietly did not run.
 */
export function stackEnvironment(env: NodeJS.ProcessEnv = process.env, dotEnv: Record<string, string> = readDotEnv()): NodeJS.ProcessEnv {
  const fromFile: Record<string, string> = {};
  for (const name of [AUTH_BIN_VARIABLE, LOCAL_POSTGRES_VARIABLE]) {
    if (env[name] === undefined && dotEnv[name] !== undefined) fromFile[name] = dotEnv[name];
  }
  return { ...env, ...fromFile };
}
