// TypeScript SDK v2 (@modelcontextprotocol/server 2.3.1) Streamable HTTP server that tether's
// tests use as a reference peer for both protocol eras. Serves the `count` demo tool as
// docs/CONTRACTS.md#demo-count specifies it: `count {n, interval_ms}` sends n
// `notifications/progress` (progress 1..n, total n) for the request's progressToken (without
// one, n `notifications/message` log messages), waiting interval_ms between them, then
// returns the text `counted n`. `--era` picks what is served:
//   legacy  2025-11-25 only: sessions (Mcp-Session-Id, DELETE) over the SDK's
//           WebStandardStreamableHTTPServerTransport, resumable with Last-Event-ID through an
//           in-memory event store (the v2 SDK ships none, so it is defined here) and a `retry`
//           of --retry-ms; requests without a session that are not `initialize` get 400
//   modern  2026-07-28 only: stateless, `server/discover`, the per-request `_meta` envelope
//           (createMcpHandler with `legacy: 'reject'`: 2025-era requests get the
//           unsupported-protocol-version error)
//   both    one endpoint for both: the SDK's isLegacyRequest() routes requests without the
//           envelope claim to the legacy sessions above and the rest to the modern handler
// Usage: node server-2026.mjs [--bind 127.0.0.1:PORT] [--era legacy|modern|both] [--retry-ms MS]
// (port 0, the default, picks a free one; era defaults to both, --retry-ms to 500). Prints one
// line once listening, as every peer the test kit's launcher starts does:
//   peer: serving http://127.0.0.1:PORT/mcp
// Errors and rejected requests are logged to stderr.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { parseArgs } from 'node:util';

import {
  createMcpHandler,
  isInitializeRequest,
  isLegacyRequest,
  McpServer,
  WebStandardStreamableHTTPServerTransport,
} from '@modelcontextprotocol/server';
import * as z from 'zod';

const { values: opts } = parseArgs({
  options: {
    bind: { type: 'string', default: '127.0.0.1:0' },
    era: { type: 'string', default: 'both' },
    'retry-ms': { type: 'string', default: '500' },
  },
});
if (!['legacy', 'modern', 'both'].includes(opts.era)) {
  console.error(`server-2026: --era must be legacy, modern or both, not ${opts.era}`);
  process.exit(2);
}
const log = (...args) => console.error('server-2026:', ...args);

function countServer() {
  const server = new McpServer(
    { name: 'tether-interop-ts-server-2026', version: '1.0.0' },
    { capabilities: { logging: {} } },
  );
  server.registerTool(
    'count',
    {
      description: 'Emits n progress notifications (or n log messages without a progressToken), then returns "counted n".',
      inputSchema: z.object({
        n: z.number().int().min(0).max(10_000_000),
        interval_ms: z.number().int().min(0).default(0),
      }),
    },
    async ({ n, interval_ms }, ctx) => {
      const progressToken = ctx.mcpReq._meta?.progressToken;
      for (let i = 1; i <= n; i++) {
        await ctx.mcpReq.notify(
          progressToken !== undefined
            ? { method: 'notifications/progress', params: { progressToken, progress: i, total: n } }
            : { method: 'notifications/message', params: { level: 'info', logger: 'count', data: { index: i, total: n } } },
        );
        if (interval_ms > 0 && i < n) await new Promise((r) => setTimeout(r, interval_ms));
      }
      return { content: [{ type: 'text', text: `counted ${n}` }] };
    },
  );
  return server;
}

// The session's events in order; ids are `<stream>_<seq>`. A replay of a request's stream
// follows it until its response is stored (the SDK registers the resumed stream only after
// the replay settles, so a message stored in between would reach no one); the standalone GET
// stream has no end, so its replay returns once it has caught up. Same as server.mjs's.
const GET_STREAM = '_GET_stream';
const isResponse = (m) => m.id !== undefined && ('result' in m || 'error' in m);
class MemoryEventStore {
  events = [];
  waiters = [];
  async storeEvent(streamId, message) {
    const eventId = `${streamId}_${this.events.length}`;
    this.events.push({ eventId, streamId, message });
    for (const wake of this.waiters.splice(0)) wake();
    return eventId;
  }
  async replayEventsAfter(lastEventId, { send }) {
    const index = this.events.findIndex((e) => e.eventId === lastEventId);
    if (index < 0) throw new Error(`unknown event id ${lastEventId}`);
    const { streamId } = this.events[index];
    const ended = this.events.slice(0, index + 1).some((e) => e.streamId === streamId && isResponse(e.message));
    const follow = streamId !== GET_STREAM && !ended;
    for (let i = index + 1; ; i++) {
      while (i >= this.events.length) {
        if (!follow) return streamId;
        await new Promise((wake) => this.waiters.push(wake));
      }
      const e = this.events[i];
      if (e.streamId !== streamId || !e.message.jsonrpc) continue; // priming events are `{}`
      await send(e.eventId, e.message);
      if (isResponse(e.message)) return streamId;
    }
  }
}

// 2025-11-25 with sessions: one transport + server per session, keyed by Mcp-Session-Id.
const sessions = new Map();
const jsonError = (status, message) =>
  Response.json({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }, { status });
async function legacy(request) {
  const sessionId = request.headers.get('mcp-session-id');
  let transport = sessionId ? sessions.get(sessionId) : undefined;
  if (!transport && !sessionId && request.method === 'POST') {
    const body = await request.json().catch(() => undefined);
    if (isInitializeRequest(body)) {
      transport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new MemoryEventStore(),
        retryInterval: Number(opts['retry-ms']),
        onsessioninitialized: (id) => sessions.set(id, transport),
        onsessionclosed: (id) => sessions.delete(id),
      });
      transport.onclose = () => transport.sessionId && sessions.delete(transport.sessionId);
      await countServer().connect(transport);
      return transport.handleRequest(request, { parsedBody: body });
    }
  }
  if (!transport) return sessionId ? jsonError(404, 'Session not found') : jsonError(400, 'Bad Request: no valid session ID');
  return transport.handleRequest(request);
}

const modern = createMcpHandler(() => countServer(), { legacy: 'reject', onerror: (e) => log(e.message) });
const handle = {
  legacy,
  modern: (request) => modern.fetch(request),
  both: async (request) => ((await isLegacyRequest(request)) ? legacy(request) : modern.fetch(request)),
}[opts.era];

// node:http <-> fetch Request/Response (the SDK's own adapter, @modelcontextprotocol/node, has
// no 2.3 release); a client that goes away aborts the request and cancels the response stream.
const http = createServer(async (req, res) => {
  try {
    if (new URL(req.url, 'http://x').pathname !== '/mcp') return void res.writeHead(404).end();
    const abort = new AbortController();
    res.on('close', () => abort.abort());
    const hasBody = req.method !== 'GET' && req.method !== 'HEAD' && req.method !== 'DELETE';
    const request = new Request(`http://${req.headers.host}${req.url}`, {
      method: req.method,
      headers: Object.entries(req.headers).flatMap(([k, v]) => (Array.isArray(v) ? v.map((x) => [k, x]) : [[k, v]])),
      ...(hasBody ? { body: Readable.toWeb(req), duplex: 'half' } : {}),
      signal: abort.signal,
    });
    const response = await handle(request);
    res.writeHead(response.status, [...response.headers].flat());
    res.flushHeaders();
    if (response.body) await pipeline(Readable.fromWeb(response.body), res).catch(() => {});
    else res.end();
  } catch (error) {
    log('request failed:', error);
    if (!res.headersSent) res.writeHead(500).end();
  }
});
const [host, port] = [opts.bind.slice(0, opts.bind.lastIndexOf(':')), opts.bind.slice(opts.bind.lastIndexOf(':') + 1)];
http.listen(Number(port), host, () => {
  process.stdout.write(`peer: serving http://${host}:${http.address().port}/mcp\n`);
});
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
