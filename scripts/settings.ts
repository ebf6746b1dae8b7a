import { ConfigError, parseSettings, type Settings } from '../src/config.ts';

// Scripts read their settings through the service's own parser, so a bad
// value is refused with the same one line, never used half-parsed.

/** The named settings from the environment (npm scripts load .env), or exit 2 with the one-line reason. */
export function scriptSettings(names: readonly (keyof Settings)[], env: NodeJS.ProcessEnv = process.env): Partial<Settings> {
  try {
    return parseSettings(env, names);
  } catch (error) {
    if (!(error instanceof ConfigError)) throw error;
    console.error(error.message);
    process.exit(2);
  }
}
