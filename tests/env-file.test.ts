import { describe, expect, it } from 'vitest';
import { preloadOf, TRICKY_DOT_ENV, TRICKY_EXPECTED, TRICKY_NAMES, variablesSeen } from './support/dot-env.ts';

// The .env that `npm run dev`, migrate and the other scripts read, through the
// module their npm scripts preload (the compiled one `npm start` preloads is in
// build.test.ts). Node's own --env-file gave a value of spaces alone the next
// line: CAPTCHA_SECRET was 'ADMIN_JWT_SECRET=…', and ADMIN_JWT_SECRET unset.

describe('.env, as the scripts read it', () => {
  it.each(['dev', 'migrate', 'admin-token', 'grant-role', 'revoke-role'])('npm run %s reads each line as written; the environment wins', async (script) => {
    const result = await variablesSeen(await preloadOf(script), TRICKY_DOT_ENV, TRICKY_NAMES, { GIVEN: 'from the environment' });
    expect(result).toEqual({ code: 0, seen: TRICKY_EXPECTED, printed: '' });
  });

  it('without a .env: nothing set, nothing said', async () => {
    const result = await variablesSeen(await preloadOf('dev'), undefined, ['PORT']);
    expect(result).toEqual({ code: 0, seen: { PORT: null }, printed: '' });
  });
});
