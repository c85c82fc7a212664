// TypeScript SDK (@modelcontextprotocol/sdk 1.32.2) client that tether's tests use as a
// reference peer. Connects to a Streamable HTTP endpoint, calls a tool (`count` unless
// `--tool` says otherwise) with a progress callback and prints one JSON line per received
// progress notification (`{"progress": p, "total": t}`) or log message (`{"log": data}`),
// then the result (`{"result": CallToolResult}`). The SDK resumes a cut stream with GET +
// Last-Event-ID by itself. Exits 0 on success, 1 if the tool failed, 2 on any other error
// (a DELETE answered with an error status included).
//
// `--list-tools` calls `tools/list` after initialize and prints `{"tools": [names...]}`
// before anything else. The session always ends with DELETE (`terminateSession()`) after
// the call; `--terminate` also prints `{"terminated": "<session id>", "status": <DELETE's
// HTTP status>}` after the result, so a test can check that the id is gone.
//
// The tool's arguments are `{"n": N, "interval_ms": MS}` (what `count` takes) unless
// `--arguments JSON` replaces them; N may then be omitted, and is ignored if given.
// `--bearer-token-file FILE` sends `Authorization: Bearer <the file's first line>` on every
// request, resumes included (the SDK's `requestInit` headers).
// Usage: node client.mjs URL [N] [--interval-ms MS] [--no-progress] [--tool NAME]
//        [--arguments JSON] [--list-tools] [--terminate] [--bearer-token-file FILE]
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'interval-ms': { type: 'string', default: '0' },
    'no-progress': { type: 'boolean', default: false },
    tool: { type: 'string', default: 'count' },
    arguments: { type: 'string' },
    'list-tools': { type: 'boolean', default: false },
    terminate: { type: 'boolean', default: false },
    'bearer-token-file': { type: 'string' },
  },
});
const [url, n] = positionals;
const usage = (message) => {
  console.error(`client: ${message}`);
  process.exit(2);
};
if (url === undefined) usage('URL is required');
let toolArguments;
if (opts.arguments !== undefined) {
  try {
    toolArguments = JSON.parse(opts.arguments);
  } catch (error) {
    usage(`--arguments is not JSON: ${error.message}`);
  }
  if (toolArguments === null || typeof toolArguments !== 'object' || Array.isArray(toolArguments)) {
    usage('--arguments must be a JSON object');
  }
} else {
  if (n === undefined) usage('N is required unless --arguments is given');
  toolArguments = { n: Number(n), interval_ms: Number(opts['interval-ms']) };
}
const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

// The status of the DELETE that terminateSession() sends (the SDK only throws on errors
// other than 405, and does not say which status it got).
let deleteStatus;
const watchingFetch = async (input, init) => {
  const response = await fetch(input, init);
  if (init?.method === 'DELETE') deleteStatus = response.status;
  return response;
};

let requestInit;
if (opts['bearer-token-file'] !== undefined) {
  const token = readFileSync(opts['bearer-token-file'], 'utf8').split('\n')[0].trim();
  requestInit = { headers: { Authorization: `Bearer ${token}` } };
}

const transport = new StreamableHTTPClientTransport(new URL(url), {
  ...(opts.terminate ? { fetch: watchingFetch } : {}),
  ...(requestInit ? { requestInit } : {}),
  reconnectionOptions: {
    initialReconnectionDelay: 200,
    maxReconnectionDelay: 2000,
    reconnectionDelayGrowFactor: 1.5,
    maxRetries: 5,
  },
});
const client = new Client({ name: 'tether-interop-ts-client', version: '1.0.0' });
client.setNotificationHandler(LoggingMessageNotificationSchema, (note) => emit({ log: note.params.data }));

try {
  await client.connect(transport);
  if (opts['list-tools']) {
    const { tools } = await client.listTools();
    emit({ tools: tools.map((tool) => tool.name) });
  }
  const result = await client.callTool(
    { name: opts.tool, arguments: toolArguments },
    undefined,
    {
      onprogress: opts['no-progress'] ? undefined : (p) => emit({ progress: p.progress, total: p.total }),
      resetTimeoutOnProgress: true,
    },
  );
  emit({ result });
  const sessionId = transport.sessionId;
  await transport.terminateSession();
  if (opts.terminate) {
    emit({ terminated: sessionId ?? null, status: deleteStatus ?? null });
  }
  await client.close();
  process.exit(result.isError ? 1 : 0);
} catch (error) {
  console.error('client:', error);
  process.exit(2);
}
