// TypeScript SDK (@modelcontextprotocol/sdk 1.32.2) client that tether's tests use as a
// reference peer. Connects to a Streamable HTTP endpoint, calls the `count` tool with a
// progress callback and prints one JSON line per received progress notification
// (`{"progress": p, "total": t}`) or log message (`{"log": data}`), then the result
// (`{"result": CallToolResult}`). The SDK resumes a cut stream with GET + Last-Event-ID by
// itself. Exits 0 on success, 1 if the tool failed, 2 on any other error.
// Usage: node client.mjs URL N [--interval-ms MS] [--no-progress]
import { parseArgs } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'interval-ms': { type: 'string', default: '0' },
    'no-progress': { type: 'boolean', default: false },
  },
});
const [url, n] = positionals;
const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

const transport = new StreamableHTTPClientTransport(new URL(url), {
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
  const result = await client.callTool(
    { name: 'count', arguments: { n: Number(n), interval_ms: Number(opts['interval-ms']) } },
    undefined,
    {
      onprogress: opts['no-progress'] ? undefined : (p) => emit({ progress: p.progress, total: p.total }),
      resetTimeoutOnProgress: true,
    },
  );
  emit({ result });
  await transport.terminateSession();
  await client.close();
  process.exit(result.isError ? 1 : 0);
} catch (error) {
  console.error('client:', error);
  process.exit(2);
}
