// TypeScript SDK (@modelcontextprotocol/sdk 1.32.2) Streamable HTTP server that tether's tests
// use as a reference peer. Serves the `count` demo tool exactly as docs/CONTRACTS.md#demo-count
// specifies it, with sessions and resumability on: one in-memory event store per session and a
// `retry` interval, so cut streams can be resumed with `Last-Event-ID`.
// Usage: node server.mjs --bind 127.0.0.1:0 [--retry-ms 500] [--json-response]
// Prints `peer: serving http://127.0.0.1:PORT/mcp` on stdout once listening; logs go to stderr.
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import { registerCount } from './count.mjs';

const { values: opts } = parseArgs({
  options: {
    bind: { type: 'string', default: '127.0.0.1:0' },
    'retry-ms': { type: 'string', default: '500' },
    'json-response': { type: 'boolean', default: false },
  },
});
const log = (...args) => console.error('peer:', ...args);

// Every event of the session in order; ids are `<stream>_<seq>` (the SDK's example store
// sorts by timestamp, which reorders events written within one millisecond). A replay of a
// request's stream follows it until its response is stored instead of handing the live tail
// back to the SDK, which registers the resumed stream only after the replay's promise
// settles: a message stored in between would reach neither. The standalone GET stream has
// no end, so its replay returns once it has caught up.
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
      // Priming events are stored as `{}`: they are not messages to replay.
      if (e.streamId !== streamId || !e.message.jsonrpc) continue;
      await send(e.eventId, e.message);
      if (isResponse(e.message)) return streamId;
    }
  }
}

function countServer() {
  const server = new McpServer(
    { name: 'tether-interop-ts', version: '1.0.0' },
    { capabilities: { logging: {} } },
  );
  registerCount(server);
  return server;
}

const transports = new Map(); // session id -> transport

async function readJson(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8');
  try {
    return JSON.parse(text);
  } catch {
    return undefined; // the transport answers 400 parse error itself
  }
}

const http = createServer(async (req, res) => {
  try {
    if (new URL(req.url, 'http://x').pathname !== '/mcp') {
      res.writeHead(404).end();
      return;
    }
    const sessionId = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? await readJson(req) : undefined;
    let transport = sessionId ? transports.get(sessionId) : undefined;
    if (!transport && !sessionId && req.method === 'POST' && isInitializeRequest(body)) {
      transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: new MemoryEventStore(),
        retryInterval: Number(opts['retry-ms']),
        enableJsonResponse: opts['json-response'],
        onsessioninitialized: (id) => transports.set(id, transport),
        onsessionclosed: (id) => transports.delete(id),
      });
      transport.onclose = () => transport.sessionId && transports.delete(transport.sessionId);
      await countServer().connect(transport);
    }
    if (!transport) {
      const [status, message] = sessionId ? [404, 'Session not found'] : [400, 'Bad Request: no valid session ID'];
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
      return;
    }
    await transport.handleRequest(req, res, body);
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
