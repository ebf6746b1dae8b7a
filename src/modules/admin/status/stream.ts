import { PassThrough } from 'node:stream';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Config } from '../../../config.ts';
import { AppError } from '../../../lib/errors.ts';
import { bearerToken, type Caller, callerOf, isAdmin } from '../../../plugins/auth.ts';
import { createStreamRegistry, END_REASONS, type EndReason } from './stream-registry.ts';

// /admin/status/stream: the dashboard's numbers as server-sent events, a
// snapshot every interval, to an admin authorized before the handler runs.

/** Open dashboard streams one admin may hold; a new one ends the oldest. */
export const MAX_STREAMS_PER_ADMIN = 3;
/** How long a browser waits before it opens a stream again after losing one. */
export const STREAM_RETRY_MS = 3_000;

export interface StatusStreamOptions {
  config: Config;
  /** Milliseconds between snapshots. */
  intervalMs: number;
  /** Longest a client may stay behind (not reading) before its stream is closed. */
  stalledLimitMs: number;
  /** Visitors active now on every website the caller may see. */
  activeVisitors(caller: Caller): Promise<unknown>;
  /** The health report shown beside the numbers. */
  health(): Promise<unknown>;
}

/** The stream's handler, and endAll() for the server's close (an open stream would keep it from closing). */
export function createStatusStream(app: FastifyInstance, { config, intervalMs, stalledLimitMs, activeVisitors, health }: StatusStreamOptions) {
  const streams = createStreamRegistry(MAX_STREAMS_PER_ADMIN);

  /**
   * A stream outlives the check made when it opened: every
   * ADMIN_STREAM_RECHECK_MS the token is verified again and its session and
   * roles read afresh, so a signed-out or demoted admin's stream ends. A
   * database hiccup (503) is not a verdict: the stream stays until the next check.
   */
  async function stillAdmin(token: string, log: FastifyBaseLogger): Promise<boolean> {
    try {
      const caller = await app.callerFromToken(token, log, { fresh: true });
      return isAdmin(caller);
    } catch (error) {
      return !(error instanceof AppError && (error.statusCode === 401 || error.statusCode === 403));
    }
  }

  async function openStream(request: FastifyRequest, reply: FastifyReply) {
    // A client that left while it was being authorized: its response closed
    // before any listener here, and a stream opened for it would hold one of
    // its admin's places, pushing out a live tab, until found stalled.
    if (reply.raw.destroyed) return reply.send();
    const stream = new PassThrough();
    // When the client stops reading (a frozen tab, a dead link that TCP has not
    // noticed), writes would pile up in memory without bound. A dashboard wants
    // the latest snapshot, not a backlog: while the client is behind, ticks are
    // skipped, and a client behind for longer than stalledLimitMs is cut off.
    let behindSince: number | undefined;
    stream.on('drain', () => (behindSince = undefined));
    const send = (event: string, data: unknown) => {
      if (!stream.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`)) behindSince ??= Date.now();
    };
    // Active visitors are read as the signed-in admin, under row-level security. They need the
    // database; when it fails, the snapshot still goes out with `live: null`, since the rest of it
    // (the database shown down) is what an operator watches the page for during an outage.
    let visitorsFailing = false;
    const readVisitors = () =>
      activeVisitors(callerOf(request)).then(
        (visitors) => ((visitorsFailing = false), visitors),
        (error: unknown) => {
          // Once per failing spell, not once a second.
          if (!visitorsFailing) request.log.warn({ err: error }, 'status stream: live visitors unavailable');
          visitorsFailing = true;
          return null;
        },
      );
    // A tick still waiting for a slow database is not joined by the next one: they would pile
    // up, one more every interval, each holding out for a pooled connection.
    let ticking = false;
    const tick = async () => {
      if (behindSince !== undefined) {
        if (Date.now() - behindSince < stalledLimitMs) return;
        request.log.warn({ behindMs: Date.now() - behindSince }, 'status stream closed: its client stopped reading');
        return stop();
      }
      if (ticking) return;
      ticking = true;
      try {
        const [metrics, report, visitors] = await Promise.all([app.metrics.snapshot(), health(), readVisitors()]);
        // Things may have changed while the snapshot was read.
        if (stopped || behindSince !== undefined) return;
        send('snapshot', { metrics, health: report, live: visitors, sample: app.metrics.history().at(-1) ?? null });
      } finally {
        ticking = false;
      }
    };
    const timer = setInterval(() => void tick().catch((error) => request.log.error({ err: error }, 'status stream tick failed')), intervalMs);
    // authorize() has set the caller and put the cookie's token, if any, in the header.
    const token = bearerToken(request) ?? '';
    const owner = `${request.caller?.kind}:${request.caller?.userId}`;
    const recheck = setInterval(() => void stillAdmin(token, request.log).then((ok) => ok || stop('signed-out')), config.ADMIN_STREAM_RECHECK_MS);
    let stopped = false;
    const stop = (reason?: EndReason) => {
      if (stopped) return;
      stopped = true;
      clearInterval(timer);
      clearInterval(recheck);
      streams.removeStream(owner, stream, stop);
      // Ending waits for the buffer to reach the client; one that is behind may never take it.
      if (behindSince !== undefined) return void stream.destroy();
      if (reason) send('end', { code: reason, reason: END_REASONS[reason] });
      stream.end();
    };
    streams.addStream(owner, stream, stop);
    reply.raw.on('close', () => stop());
    // Fastify destroys the stream when the response is gone by the time it is sent.
    stream.on('close', () => stop());
    stream.write(`retry: ${STREAM_RETRY_MS}\n\n`);
    send('history', app.metrics.history());
    void tick().catch((error) => request.log.error({ err: error }, 'status stream tick failed'));
    return reply
      .header('content-type', 'text/event-stream; charset=utf-8')
      .header('cache-control', 'no-store')
      .header('x-accel-buffering', 'no')
      .send(stream);
  }

  return { openStream, endAll: streams.endAll };
}
