// The `count` demo tool (docs/CONTRACTS.md#demo-count) on a TypeScript SDK 1.x `McpServer`
// (declare the `logging` capability: without a progressToken it logs), shared by the SDK
// servers in this folder.
import * as z from 'zod';

export function registerCount(server) {
  server.registerTool(
    'count',
    {
      description:
        'Emits n progress notifications (or n log messages without a progressToken), then returns "counted n".',
      inputSchema: {
        n: z.number().int().min(0).max(10_000_000),
        interval_ms: z.number().int().min(0).default(0),
      },
    },
    async ({ n, interval_ms }, extra) => {
      const progressToken = extra._meta?.progressToken;
      for (let i = 1; i <= n; i++) {
        if (progressToken !== undefined) {
          await extra.sendNotification({
            method: 'notifications/progress',
            params: { progressToken, progress: i, total: n },
          });
        } else {
          await extra.sendNotification({
            method: 'notifications/message',
            params: { level: 'info', logger: 'count', data: { index: i, total: n } },
          });
        }
        if (interval_ms > 0 && i < n) await new Promise((r) => setTimeout(r, interval_ms));
      }
      return { content: [{ type: 'text', text: `counted ${n}` }] };
    },
  );
}
