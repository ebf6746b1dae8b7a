import { createHash } from 'node:crypto';
import { issueIdToken } from './stack/oidc-issuer.ts';
import { DEV_PORTS, devSecrets } from './dev-env.ts';

// `npm run id-token -- <email> [nonce]`: signs in to the local stack's OIDC
// issuer (the `keycloak` provider of `npm run dev`) as <email> and prints the
// id token, to try POST /api/auth/link with {"provider":"keycloak","token":…}.
// With a nonce, the token carries its SHA-256, as a front end asks for it;
// send the nonce itself as the link body's `nonce`.

const [email, nonce] = process.argv.slice(2);
if (!email?.includes('@')) {
  console.error('usage: npm run id-token -- <email> [nonce]');
  process.exit(2);
}
const secrets = await devSecrets();
const issuer = { issuer: `http://127.0.0.1:${DEV_PORTS.oidcIssuer}`, clientId: 'portfolio-backend', clientSecret: secrets.OIDC_CLIENT_SECRET };
const redirectUri = `http://127.0.0.1:${DEV_PORTS.gateway}/auth/v1/callback`;
try {
  const hashedNonce = nonce === undefined ? undefined : createHash('sha256').update(nonce).digest('hex');
  console.log(await issueIdToken(issuer, redirectUri, email, { nonce: hashedNonce }));
} catch (error) {
  console.error(`Could not get an id token from ${issuer.issuer} (is npm run dev running with Supabase Auth?): ${(error as Error).message}`);
  process.exit(1);
}
