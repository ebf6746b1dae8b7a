import type { TestProject } from 'vitest/node';
import { startStack, type Stack } from '../../scripts/stack/index.ts';

// One stack per `npm test` run: a fresh, uniquely named database (dropped at
// the end) and an SMTP sink. A missing PostgreSQL fails the run loudly.

declare module 'vitest' {
  export interface ProvidedContext {
    stack: { databaseUrl: string; postgresUrl: string; smtpPort: number; mailApiUrl: string };
  }
}

let stack: Stack | undefined;

export async function setup(project: TestProject) {
  stack = await startStack({ log: (line) => console.log(`[stack] ${line}`) });
  project.provide('stack', {
    databaseUrl: stack.databaseUrl,
    postgresUrl: stack.postgresUrl,
    smtpPort: stack.mail.smtpPort,
    mailApiUrl: stack.mail.apiUrl,
  });
}

export async function teardown() {
  await stack?.stop();
}
