// An authorization server for tether's resource-server tests: oauth2-mock-server (pinned in
// interop/package.json) on loopback, with a fresh RS256 key at every start (restarting it on the
// same port rotates its keys). Its token endpoint issues what a test asks for:
//   POST /token grant_type=client_credentials&resource=URI&scope=S
//        [&claims=JSON (merged into the payload; a null removes a claim)]
//        [&header=JSON (merged into the JWT header, e.g. {"typ": "at+jwt"})]
// `aud` is the `resource` asked for; `sub` is the client id unless `claims` says otherwise.
// It serves only OpenID discovery, so tether's RFC 8414 lookup meets a 404 and falls through.
//
//   node interop/oauth/mock-as.mjs --bind 127.0.0.1:0
// prints `as: serving http://127.0.0.1:PORT` once listening.
import { OAuth2Server, Events } from 'oauth2-mock-server';

const args = process.argv.slice(2);
const bind = args[args.indexOf('--bind') + 1] ?? '127.0.0.1:0';
const [host, port] = bind.split(':');

const server = new OAuth2Server();
await server.issuer.keys.generate('RS256');
server.service.on(Events.BeforeTokenSigning, (token, req) => {
  const body = req.body ?? {};
  token.payload.sub = body.client_id ?? 'test-client';
  if (body.resource !== undefined) token.payload.aud = body.resource;
  if (body.scope !== undefined) token.payload.scope = body.scope;
  for (const [key, value] of Object.entries(JSON.parse(body.claims ?? '{}'))) {
    if (value === null) delete token.payload[key];
    else token.payload[key] = value;
  }
  Object.assign(token.header, JSON.parse(body.header ?? '{}'));
});
await server.start(Number(port), host);
// The issuer as clients reach it: the loopback address, not the name `localhost`.
server.issuer.url = `http://${host}:${server.address().port}`;
console.log(`as: serving ${server.issuer.url}`);
for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, async () => {
    await server.stop();
    process.exit(0);
  });
}
