import type { ServerResponse } from 'node:http';
import { PassThrough } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { buildApp } from '../../src/app.ts';
import statusRoutes from '../../src/modules/admin/status/routes.ts';
import { testConfig } from './app.ts';

/** A dashboard stream the server writes into, and the response it goes out on. */
export interface OpenedStream {
  stream: PassThrough;
  response: ServerResponse;
}

/**
 * The dashboard's routes once more, under /stalled-status, ticking every 5 ms
 * with a 256 KB snapshot, so a client that stops reading fills the socket's
 * buffers within a second. `opened` receives each stream the server opens.
 */
export async function floodingDashboardApp(databaseUrl: string, stalledLimitMs: number): Promise<{ app: FastifyInstance; opened: OpenedStream[] }> {
  const config = testConfig({ DATABASE_URL: databaseUrl });
  const opened: OpenedStream[] = [];
  const app = await buildApp(
    { config },
    {
      extend: async (scope) => {
        scope.addHook('onSend', async (_request, reply, payload) => {
          if (payload instanceof PassThrough) opened.push({ stream: payload, response: reply.raw });
          return payload;
        });
        await scope.register(statusRoutes, {
          prefix: '/stalled-status',
          config,
          version: 'test',
          intervalMs: 5,
          stalledLimitMs,
          activeVisitors: async () => ({ padding: 'x'.repeat(256 * 1024) }),
        });
      },
    },
  );
  return { app, opened };
}
