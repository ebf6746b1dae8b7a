import { readDotEnv } from './dot-env.ts';

// Preloaded (`node --import`) by `npm start`, `npm run dev` and the scripts:
// the variables of ./.env, when there is one, for each not already set, so a
// variable given on the command line or by a process manager wins.

for (const [name, value] of Object.entries(readDotEnv())) process.env[name] ??= value;
