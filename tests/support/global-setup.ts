import type { TestProject } from 'vitest/node';
import { AUTH_BIN_VARIABLE, findAuthBinary } from '../../scripts/stack/auth-server.ts';
import { startStack, type Stack } from '../../scripts/stack/index.ts';
import { AUTH_SUITES } from './auth-suites.ts';
import { TEST_JWT_SECRET } from './secrets.ts';

// One stack per `npm test` run: a fresh, uniquely named database (dropped at
// the end), an SMTP sink, and Supabase Auth with its OIDC issuer whenever a
// binary is there. A missing PostgreSQL fails the run loudly.

export interface RealAuth {
  binary: string;
  url: string;
  anonKey: string;
  serviceRoleKey: string;
  oidc: { issuer: string; clientId: string; clientSecret: string; redirectUri: string };
}

declare module 'vitest' {
  export interface ProvidedContext {
    stack: { databaseUrl: string; postgresUrl: string; smtpPort: number; mailApiUrl: string; auth: RealAuth | null };
  }
}

let stack: Stack | undefined;

export async function setup(project: TestProject) {
  const binary = findAuthBinary();
  stack = await startStack({
    auth: binary ? { binary, jwtSecret: TEST_JWT_SECRET } : undefined,
    log: (line) => console.log(`[stack] ${line}`),
  });
  if (binary) {
    console.log(`[stack] auth suites run against ${binary}: ${AUTH_SUITES.length} (${AUTH_SUITES.join(', ')})`);
  } else {
    console.log(`[stack] Supabase Auth not found, so these did not run: ${AUTH_SUITES.join(', ')}. Set ${AUTH_BIN_VARIABLE} (or put gotrue on the PATH) to run them.`);
  }
  const { auth } = stack;
  project.provide('stack', {
    databaseUrl: stack.databaseUrl,
    postgresUrl: stack.postgresUrl,
    smtpPort: stack.mail.smtpPort,
    mailApiUrl: stack.mail.apiUrl,
    auth:
      auth && binary
        ? {
            binary,
            url: auth.url,
            anonKey: auth.anonKey,
            serviceRoleKey: auth.serviceRoleKey,
            oidc: { issuer: auth.oidc.issuer, clientId: auth.oidc.clientId, clientSecret: auth.oidc.clientSecret, redirectUri: auth.oidc.redirectUri },
          }
        : null,
  });
}

export async function teardown() {
  await stack?.stop();
}
