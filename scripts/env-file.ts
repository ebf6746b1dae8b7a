import { readFileSync } from 'node:fs';
import { parse } from 'dotenv';

// Preloaded (`node --import`) by `npm start`, `npm run dev` and the scripts:
// the variables of ./.env, when there is one, for each not already set, so a
// variable given on the command line or by a process manager wins. Read with
// dotenv's parser, not Node's own --env-file: in Node 24 that gives a
// variable written with only spaces after its `=` the whole next line as its
// value, so `CAPTCHA_SECRET= ` above `ADMIN_JWT_SECRET=…` moved the admin
// secret into the bot-check secret and reported the admin secret missing.

function readDotEnv(): string | undefined {
  try {
    return readFileSync('.env', 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw error;
  }
}

const text = readDotEnv();
if (text !== undefined) {
  for (const [name, value] of Object.entries(parse(text))) process.env[name] ??= value;
}
