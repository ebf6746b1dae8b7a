import { readFileSync } from 'node:fs';
import { parse } from 'dotenv';

/**
 * The variables of ./.env, none when there is no such file. Read with dotenv's
 * parser, not Node's own --env-file: in Node 24 that gives a variable written
 * with only spaces after its `=` the whole next line as its value, so
 * `CAPTCHA_SECRET= ` above `ADMIN_JWT_SECRET=…` moved the admin secret into
 * the bot-check secret and reported the admin secret missing.
 */
export function readDotEnv(file = '.env'): Record<string, string> {
  try {
    return parse(readFileSync(file, 'utf8'));
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return {};
    throw error;
  }
}
