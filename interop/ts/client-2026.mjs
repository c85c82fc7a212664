// TypeScript SDK v2 (@modelcontextprotocol/client 2.3.1) client that tether's tests use as a
// reference peer for the 2026-07-28 ("modern", stateless) era. The client is pinned to
// 2026-07-28 (`versionNegotiation: { mode: { pin } }`): connect() sends no initialize, it
// probes with server/discover and fails unless the server offers exactly that version.
// Prints one JSON line per event:
//   {"event":"connected","protocolVersion":V,"server":{"name":..,"version":..}}
//   {"event":"tools","names":[...]}                       (tools/list)
//   {"event":"progress","progress":p,"total":t}           (one per progress notification)
//   {"event":"result","text":T}                           (first text content of `count`)
// `count` is called with `{"n": N, "interval_ms": MS}` (MS from `--interval-ms`, default 0).
//
// `--elicit` declares the elicitation capability with a handler that accepts with
// `{"name": "Alice"}`, then calls `test_input_required_result_elicitation` with `{}`. In
// 2026-07-28 the server answers with an `input_required` result (SEP-2322 multi-round-trip
// requests); the SDK fulfils it through the handler and retries the call by itself. Prints
//   {"event":"elicited","message":M}                      (from inside the handler)
//   {"event":"result","tool":"test_input_required_result_elicitation","text":T}
//
// Exits 0 on success; on any error (a tool result with isError included) prints
// {"event":"error","message":...} and exits 1. Usage errors go to stderr with exit 2.
// `--auto` negotiates instead of pinning (`versionNegotiation: { mode: 'auto' }`): the SDK
// probes server/discover and falls back to initialize; the connected line names the version
// it settled on.
// `--tool NAME` calls the `count` tool by another name (behind a federating gateway,
// `<upstream>_count`).
// Usage: node client-2026.mjs URL N [--interval-ms MS] [--elicit] [--auto] [--tool NAME]
import { parseArgs } from 'node:util';

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

const PINNED_VERSION = '2026-07-28';
const ELICIT_TOOL = 'test_input_required_result_elicitation';

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    'interval-ms': { type: 'string', default: '0' },
    elicit: { type: 'boolean', default: false },
    auto: { type: 'boolean', default: false },
    tool: { type: 'string', default: 'count' },
  },
});
const [url, n] = positionals;
const usage = (message) => {
  console.error(`client-2026: ${message}`);
  process.exit(2);
};
if (url === undefined) usage('URL is required');
if (n === undefined) usage('N is required');
if (!Number.isInteger(Number(n))) usage(`N is not an integer: ${n}`);
if (!Number.isInteger(Number(opts['interval-ms']))) usage(`--interval-ms is not an integer: ${opts['interval-ms']}`);
const emit = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const fail = (error) => {
  emit({ event: 'error', message: error instanceof Error ? error.message : String(error) });
  process.exit(1);
};

// The first text content block of a CallToolResult; a tool error is a failure of the run.
const firstText = (name, result) => {
  if (result.isError) throw new Error(`tool ${name} failed: ${JSON.stringify(result.content)}`);
  const block = (result.content ?? []).find((content) => content.type === 'text');
  if (block === undefined) throw new Error(`tool ${name} returned no text content: ${JSON.stringify(result)}`);
  return block.text;
};

const transport = new StreamableHTTPClientTransport(new URL(url));
const client = new Client(
  { name: 'tether-interop-ts-client-2026', version: '1.0.0' },
  {
    versionNegotiation: { mode: opts.auto ? 'auto' : { pin: PINNED_VERSION } },
    ...(opts.elicit ? { capabilities: { elicitation: { form: {} } } } : {}),
  },
);
if (opts.elicit) {
  client.setRequestHandler('elicitation/create', async (request) => {
    emit({ event: 'elicited', message: request.params.message });
    return { action: 'accept', content: { name: 'Alice' } };
  });
}

try {
  await client.connect(transport);
  emit({
    event: 'connected',
    protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
    server: client.getServerVersion() ?? null,
  });

  const { tools } = await client.listTools();
  emit({ event: 'tools', names: tools.map((tool) => tool.name) });

  const counted = await client.callTool(
    { name: opts.tool, arguments: { n: Number(n), interval_ms: Number(opts['interval-ms']) } },
    {
      onprogress: (p) => emit({ event: 'progress', progress: p.progress, total: p.total }),
      resetTimeoutOnProgress: true,
    },
  );
  emit({ event: 'result', text: firstText(opts.tool, counted) });

  if (opts.elicit) {
    const elicited = await client.callTool({ name: ELICIT_TOOL, arguments: {} });
    emit({ event: 'result', tool: ELICIT_TOOL, text: firstText(ELICIT_TOOL, elicited) });
  }

  await client.close();
  process.exit(0);
} catch (error) {
  fail(error);
}
