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
//   - revocation (RFC 7009) at /token/revocation, by the client the token was issued to.
//
//   node interop/oauth/oidc-as.mjs --bind 127.0.0.1:0 [--token-ttl-secs N]
// prints `as: serving http://127.0.0.1:PORT` once listening.
import http from 'node:http';
import Provider from 'oidc-provider';

const args = process.argv.slice(2);
const flag = (name, fallback) => {
  const at = args.indexOf(name);
  return at === -1 ? fallback : args[at + 1];
};
const [host, port] = flag('--bind', '127.0.0.1:0').split(':');
const tokenTtl = Number(flag('--token-ttl-secs', '600'));

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
  scopes: ['mcp:tools', 'mcp:admin'],
  features: {
    devInteractions: { enabled: false },
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
        accessTokenFormat: 'opaque',
        accessTokenTTL: tokenTtl,
      }),
    },
  },
});
// oidc-provider warns about its development keys and cookie secrets; neither is used here.
provider.on('server_error', (ctx, error) => console.error('as: server error', error));
handle = provider.callback();

console.log(`as: serving ${issuer}`);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.close();
    process.exit(0);
  });
}
