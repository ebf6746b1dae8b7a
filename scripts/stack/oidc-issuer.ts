import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, generateKeyPair } from 'jose';
import Provider, { type Adapter, type AdapterPayload } from 'oidc-provider';

// A local OpenID Connect issuer (panva's certified oidc-provider) that the
// stack configures as Supabase Auth's `keycloak` provider, so identity linking
// runs end to end: discovery, JWKS and RS256-signed id tokens from a real
// authorization-code flow. Its only local shortcut is the sign-in screen: the
// interaction signs in whoever `login_hint` names, and grants the scopes.

export interface OidcIssuer {
  issuer: string;
  clientId: string;
  clientSecret: string;
  stop(): Promise<void>;
}

export interface OidcIssuerOptions {
  port?: number;
  clientId?: string;
  /** Fixed in dev so `npm run id-token` can ask for tokens; random otherwise. */
  clientSecret?: string;
  /** Where the provider sends the code: the auth server's OAuth callback. */
  redirectUri: string;
}

/** The stable subject of the account that signs in as `email`. */
export function subjectFor(email: string): string {
  return createHash('sha256').update(email.toLowerCase()).digest('hex').slice(0, 32);
}

const accounts = new Map<string, { email: string; name: string }>();

/**
 * The issuer's sessions, grants and codes, in memory: a local issuer that
 * forgets everything when the stack stops is what dev and tests want. (Given
 * explicitly, so the library does not warn that its default is for
 * development only.)
 */
function memoryAdapter(): (name: string) => Adapter {
  const store = new Map<string, { payload: AdapterPayload; expiresAt?: number }>();
  const live = (key: string) => {
    const entry = store.get(key);
    if (entry?.expiresAt && entry.expiresAt < Date.now()) store.delete(key);
    return store.get(key)?.payload;
  };
  return (name) => ({
    async upsert(id, payload, expiresIn) {
      store.set(`${name}:${id}`, { payload, expiresAt: expiresIn ? Date.now() + expiresIn * 1000 : undefined });
      if (payload.uid) store.set(`${name}:uid:${payload.uid}`, { payload: { ...payload, jti: id } });
      if (payload.userCode) store.set(`${name}:userCode:${payload.userCode}`, { payload: { ...payload, jti: id } });
    },
    find: async (id) => live(`${name}:${id}`),
    findByUid: async (uid) => {
      const jti = live(`${name}:uid:${uid}`)?.jti;
      return jti ? live(`${name}:${jti}`) : undefined;
    },
    findByUserCode: async (userCode) => {
      const jti = live(`${name}:userCode:${userCode}`)?.jti;
      return jti ? live(`${name}:${jti}`) : undefined;
    },
    async consume(id) {
      const payload = live(`${name}:${id}`);
      if (payload) payload.consumed = Math.floor(Date.now() / 1000);
    },
    async destroy(id) {
      store.delete(`${name}:${id}`);
    },
    async revokeByGrantId(grantId) {
      for (const [key, entry] of store) if (entry.payload.grantId === grantId) store.delete(key);
    },
  });
}

export async function startOidcIssuer(options: OidcIssuerOptions): Promise<OidcIssuer> {
  const clientId = options.clientId ?? 'portfolio-backend';
  const clientSecret = options.clientSecret ?? randomBytes(24).toString('hex');
  const { privateKey } = await generateKeyPair('RS256', { extractable: true });
  const signingKey = { ...(await exportJWK(privateKey)), kid: 'local-issuer-1', alg: 'RS256', use: 'sig' };

  const server: Server = createServer();
  // Rejects when the port is taken, as an 'error' event nobody listens to would end the process.
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const provider = new Provider(issuer, {
    clients: [
      {
        client_id: clientId,
        client_secret: clientSecret,
        redirect_uris: [options.redirectUri],
        grant_types: ['authorization_code'],
        response_types: ['code'],
      },
    ],
    adapter: memoryAdapter(),
    jwks: { keys: [signingKey] },
    cookies: { keys: [randomBytes(32).toString('hex')] },
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'] },
    // Put the requested claims in the id token itself: the auth server reads only the id token.
    conformIdTokenClaims: false,
    pkce: { required: () => false },
    ttl: { AccessToken: 3600, AuthorizationCode: 60, Grant: 3600, IdToken: 3600, Interaction: 600, Session: 3600 },
    features: { devInteractions: { enabled: false } },
    interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
    async findAccount(_ctx, sub) {
      const account = accounts.get(sub);
      if (!account) return undefined;
      return { accountId: sub, claims: async () => ({ sub, email: account.email, email_verified: true, name: account.name }) };
    },
  });
  const callback = provider.callback();

  server.on('request', async (request, response) => {
    if (!request.url?.startsWith('/interaction/')) return callback(request, response);
    try {
      const details = await provider.interactionDetails(request, response);
      const email = String(details.params.login_hint ?? '');
      if (!email.includes('@')) {
        response.writeHead(400, { 'content-type': 'text/plain' }).end('login_hint must name the e-mail to sign in as');
        return;
      }
      const accountId = subjectFor(email);
      accounts.set(accountId, { email, name: email.split('@')[0] });
      const grant = new provider.Grant({ accountId, clientId: String(details.params.client_id) });
      grant.addOIDCScope(String(details.params.scope ?? 'openid'));
      const grantId = await grant.save();
      await provider.interactionFinished(request, response, { login: { accountId }, consent: { grantId } }, { mergeWithLastSubmission: false });
    } catch (error) {
      response.writeHead(500, { 'content-type': 'text/plain' }).end((error as Error).message);
    }
  });

  return {
    issuer,
    clientId,
    clientSecret,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/**
 * Runs the authorization-code flow against the issuer as a browser would
 * (following redirects, keeping cookies) and returns the id token of the
 * account `email`, as a front end would receive it from the provider.
 * `nonce` goes in the authorization request and the provider copies it into
 * the id token, as when a front end sends the hash of a nonce it keeps.
 */
export async function issueIdToken(
  issuer: Pick<OidcIssuer, 'issuer' | 'clientId' | 'clientSecret'>,
  redirectUri: string,
  email: string,
  options: { nonce?: string } = {},
): Promise<string> {
  const cookies = new Map<string, string>();
  const authorize = new URL('/auth', issuer.issuer);
  authorize.search = new URLSearchParams({
    client_id: issuer.clientId,
    response_type: 'code',
    scope: 'openid email profile',
    redirect_uri: redirectUri,
    login_hint: email,
    state: randomBytes(8).toString('hex'),
    ...(options.nonce === undefined ? {} : { nonce: options.nonce }),
  }).toString();

  let next = authorize.toString();
  for (let hop = 0; hop < 10; hop += 1) {
    const response = await fetch(next, {
      redirect: 'manual',
      headers: { cookie: [...cookies].map(([name, value]) => `${name}=${value}`).join('; ') },
    });
    for (const line of response.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const at = pair.indexOf('=');
      cookies.set(pair.slice(0, at), pair.slice(at + 1));
    }
    const location = response.headers.get('location');
    if (!location) throw new Error(`OIDC issuer stopped the sign-in with ${response.status}: ${await response.text()}`);
    const target = new URL(location, next);
    if (target.toString().startsWith(redirectUri)) {
      const code = target.searchParams.get('code');
      if (!code) throw new Error(`OIDC issuer answered without a code: ${target.search}`);
      const token = await fetch(new URL('/token', issuer.issuer), {
        method: 'POST',
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          authorization: `Basic ${Buffer.from(`${issuer.clientId}:${issuer.clientSecret}`).toString('base64')}`,
        },
        body: new URLSearchParams({ grant_type: 'authorization_code', code, redirect_uri: redirectUri }),
      });
      const body = (await token.json()) as { id_token?: string; error?: string };
      if (!body.id_token) throw new Error(`OIDC token endpoint answered ${token.status}: ${JSON.stringify(body)}`);
      return body.id_token;
    }
    next = target.toString();
  }
  throw new Error('OIDC sign-in did not finish within 10 redirects');
}
