// TypeScript SDK (@modelcontextprotocol/sdk 1.32.2) as an OAuth-protected MCP server, for the
// test of tether's OAuth client against another SDK's resource server: the SDK's own
// `mcpAuthMetadataRouter` serves the Protected Resource Metadata naming the authorization
// server, and its `requireBearerAuth` middleware checks every request to /mcp (401 with
// `resource_metadata`, 403 `insufficient_scope`, the token's resource compared with this
// server's), verifying tokens by RFC 7662 introspection at the authorization server (opaque
// tokens, as interop/oauth/oidc-as.mjs issues by default). The MCP side is stateless (no
// sessions), serving the `count` tool of docs/CONTRACTS.md#demo-count.
//
//   node protected-server.mjs --bind 127.0.0.1:0 --issuer URL [--scope mcp:tools]
//        [--introspection-client tether-rs] [--introspection-secret tether-rs-secret]
// prints `peer: serving http://HOST:PORT/mcp` once listening; logs go to stderr.
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import express from 'express';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { requireBearerAuth } from '@modelcontextprotocol/sdk/server/auth/middleware/bearerAuth.js';
import {
  getOAuthProtectedResourceMetadataUrl,
  mcpAuthMetadataRouter,
} from '@modelcontextprotocol/sdk/server/auth/router.js';
import { InvalidTokenError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { registerCount } from './count.mjs';

const { values: opts } = parseArgs({
  options: {
    bind: { type: 'string', default: '127.0.0.1:0' },
    issuer: { type: 'string' },
    scope: { type: 'string', default: 'mcp:tools' },
    'introspection-client': { type: 'string', default: 'tether-rs' },
    'introspection-secret': { type: 'string', default: 'tether-rs-secret' },
  },
});
if (!opts.issuer) throw new Error('--issuer URL is required');
const log = (...args) => console.error('peer:', ...args);

const oauthMetadata = await (
  await fetch(`${opts.issuer}/.well-known/oauth-authorization-server`)
).json();

function countServer() {
  const server = new McpServer(
    { name: 'tether-interop-ts-protected', version: '1.0.0' },
    { capabilities: { logging: {} } },
  );
  registerCount(server);
  return server;
}

// RFC 7662 introspection as this resource server's client.
async function verifyAccessToken(token) {
  const basic = Buffer.from(
    `${opts['introspection-client']}:${opts['introspection-secret']}`,
  ).toString('base64');
  const answer = await (
    await fetch(oauthMetadata.introspection_endpoint, {
      method: 'POST',
      headers: {
        authorization: `Basic ${basic}`,
        'content-type': 'application/x-www-form-urlencoded',
      },
      body: new URLSearchParams({ token, token_type_hint: 'access_token' }),
    })
  ).json();
  if (!answer.active) throw new InvalidTokenError('Token is not active');
  const audience = Array.isArray(answer.aud) ? answer.aud[0] : answer.aud;
  return {
    token,
    clientId: answer.client_id,
    scopes: (answer.scope || '').split(' ').filter(Boolean),
    expiresAt: answer.exp,
    resource: audience ? new URL(audience) : undefined,
  };
}

const [host, port] = [
  opts.bind.slice(0, opts.bind.lastIndexOf(':')),
  opts.bind.slice(opts.bind.lastIndexOf(':') + 1),
];
// The resource's URL is known once the port is: listen first, then build the app.
let app = (_req, res) => {
  res.statusCode = 503;
  res.end();
};
const http = createServer((req, res) => app(req, res));
await new Promise((resolve) => http.listen(Number(port), host, resolve));
const resource = new URL(`http://${host}:${http.address().port}/mcp`);

const routes = express();
routes.use(
  mcpAuthMetadataRouter({
    oauthMetadata,
    resourceServerUrl: resource,
    scopesSupported: [opts.scope],
  }),
);
routes.all(
  '/mcp',
  requireBearerAuth({
    verifier: { verifyAccessToken },
    requiredScopes: [opts.scope],
    resourceMetadataUrl: getOAuthProtectedResourceMetadataUrl(resource),
    expectedResource: resource,
  }),
  express.json(),
  async (req, res) => {
    try {
      const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
      const server = countServer();
      res.on('close', () => {
        transport.close();
        server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, req.body);
    } catch (error) {
      log('request failed:', error);
      if (!res.headersSent) res.status(500).end();
    }
  },
);
app = routes;

process.stdout.write(`peer: serving ${resource.href}\n`);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
