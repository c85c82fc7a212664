// A production-grade authorization server for tether's introspection tests: oidc-provider
// (pinned in interop/package.json) on loopback, configured as an operator would configure it
// for an MCP server whose tokens are opaque:
//   - resource indicators (RFC 8707): a token asked for with `resource=URI` is bound to that
//     audience, opaque, and may carry the scopes `mcp:tools` and `mcp:admin`;
//   - the client credentials grant, for the clients `app-a` and `app-b` (secrets
//     `app-a-secret`, `app-b-secret`): POST /token grant_type=client_credentials&resource=URI
//     &scope=S with HTTP Basic client authentication;
//   - introspection (RFC 7662) at /token/introspection, answered in full only to the resource
//     server's own client `tether-rs` (secret `tether-rs-secret`);
//   - revocation (RFC 7009) at /token/revocation, by the client the token was issued to;
//   - for OAuth clients (tether's client, `tether call`, `tether connect`): open Dynamic Client
//     Registration (RFC 7591), the authorization code flow with PKCE S256 and `iss` in the
//     response (RFC 9207), refresh tokens always issued and rotated for public clients, and a
//     sign-in that approves at once: /interaction/UID logs the user `alice` in and grants
//     what the client asked for, with no page to fill in. Interactions are bound to cookies,
//     so the "browser" is `curl -sSL -c JAR -b JAR -o /dev/null URL`;
//   - GET /test/counters: how many token grants (by grant type), refused grants and
//     registrations it has seen, for tests that count refreshes.
//
//   node interop/oauth/oidc-as.mjs --bind 127.0.0.1:0 [--token-ttl-secs N]
//        [--access-token-format opaque|jwt] [--deny-consent] [--hide-s256]
// prints `as: serving http://127.0.0.1:PORT` once listening. `jwt` issues RFC 9068 JWT
// access tokens (signed with the provider's keys, at its jwks_uri) instead of opaque ones;
// `--deny-consent` makes every sign-in end in `access_denied`; `--hide-s256` removes
// `code_challenge_methods_supported` from the metadata documents (an authorization server
// an MCP client must refuse).
import http from 'node:http';
import Provider from 'oidc-provider';

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = args.indexOf(name);
  return at === -1 ? fallback : args[at + 1];
};
const [host, port] = flag('--bind', '127.0.0.1:0').split(':');
const tokenTtl = Number(flag('--token-ttl-secs', '600'));
const accessTokenFormat = flag('--access-token-format', 'opaque');
const denyConsent = args.includes('--deny-consent');
const hideS256 = args.includes('--hide-s256');
const counters = { grants: {}, grant_errors: 0, registrations: 0 };

// The issuer is only known once the port is: listen first, then build the provider.
let handle = (_req, res) => {
  res.statusCode = 503;
  res.end();
};
const server = http.createServer((req, res) => handle(req, res));
await new Promise((resolve) => server.listen(Number(port), host, resolve));
const issuer = `http://${host}:${server.address().port}`;

const RESOURCE_SERVER = 'tether-rs';
const clientCredentialsClient = (id) => ({
  client_id: id,
  client_secret: `${id}-secret`,
  grant_types: ['client_credentials'],
  response_types: [],
  redirect_uris: [],
  scope: 'mcp:tools mcp:admin',
});

const provider = new Provider(issuer, {
  clients: [
    clientCredentialsClient('app-a'),
    clientCredentialsClient('app-b'),
    clientCredentialsClient(RESOURCE_SERVER),
  ],
  scopes: ['openid', 'offline_access', 'mcp:tools', 'mcp:admin'],
  ttl: { AccessToken: tokenTtl },
  // Refresh tokens for every client allowed the grant, whether or not it asked for
  // offline_access (rotation stays the provider's default: on for public clients).
  issueRefreshToken: async (ctx, client) => client.grantTypeAllowed('refresh_token'),
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    clientCredentials: { enabled: true },
    introspection: {
      enabled: true,
      allowedPolicy: async (ctx, client, token) =>
        client.clientId === RESOURCE_SERVER || client.clientId === token.clientId,
    },
    revocation: {
      enabled: true,
      allowedPolicy: async (ctx, client, token) => client.clientId === token.clientId,
    },
    resourceIndicators: {
      enabled: true,
      defaultResource: async () => undefined,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (ctx, resourceIndicator) => ({
        audience: resourceIndicator,
        scope: 'mcp:tools mcp:admin',
        accessTokenFormat,
        accessTokenTTL: tokenTtl,
      }),
    },
  },
});
// oidc-provider warns about its development keys and cookie secrets; neither is used here.
provider.on('server_error', (ctx, error) => console.error('as: server error', error));
provider.on('grant.success', (ctx) => {
  const type = ctx.oidc.params.grant_type;
  counters.grants[type] = (counters.grants[type] || 0) + 1;
});
provider.on('grant.error', (ctx, error) => {
  counters.grant_errors += 1;
  console.error(`as: grant refused: ${error.message}: ${error.error_detail || ''}`);
});
provider.on('registration_create.success', () => {
  counters.registrations += 1;
});

// The sign-in: log `alice` in, then grant every scope and resource scope the client asked
// for (or refuse, with --deny-consent).
async function interaction(req, res) {
  const details = await provider.interactionDetails(req, res);
  const { prompt, params, session } = details;
  if (denyConsent) {
    return provider.interactionFinished(
      req,
      res,
      { error: 'access_denied', error_description: 'the user declined' },
      { mergeWithLastSubmission: false },
    );
  }
  if (prompt.name === 'login') {
    return provider.interactionFinished(
      req,
      res,
      { login: { accountId: 'alice' } },
      { mergeWithLastSubmission: false },
    );
  }
  const grant = details.grantId
    ? await provider.Grant.find(details.grantId)
    : new provider.Grant({ accountId: session.accountId, clientId: params.client_id });
  const missing = prompt.details;
  if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
  if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
  for (const [indicator, scopes] of Object.entries(missing.missingResourceScopes || {})) {
    grant.addResourceScope(indicator, scopes.join(' '));
  }
  const grantId = await grant.save();
  return provider.interactionFinished(
    req,
    res,
    { consent: { grantId } },
    { mergeWithLastSubmission: true },
  );
}

const callback = provider.callback();
handle = (req, res) => {
  if (req.url === '/test/counters') {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(counters));
    return;
  }
  if (req.url.startsWith('/interaction/')) {
    interaction(req, res).catch((error) => {
      console.error('as: interaction failed', error);
      res.statusCode = 500;
      res.end(String(error));
    });
    return;
  }
  if (hideS256 && req.url.startsWith('/.well-known/')) {
    // The real document, without the PKCE methods.
    const end = res.end.bind(res);
    const chunks = [];
    res.write = (chunk) => {
      chunks.push(Buffer.from(chunk));
      return true;
    };
    res.end = (chunk) => {
      if (chunk) chunks.push(Buffer.from(chunk));
      let body = Buffer.concat(chunks).toString();
      try {
        const document = JSON.parse(body);
        delete document.code_challenge_methods_supported;
        body = JSON.stringify(document);
        res.setHeader('content-length', Buffer.byteLength(body));
      } catch {}
      return end(body);
    };
  }
  callback(req, res);
};

console.log(`as: serving ${issuer}`);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
