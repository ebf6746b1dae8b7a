import { PassThrough, type Readable } from 'node:stream';
import type { FastifyReply } from 'fastify';

// CSV (RFC 4180) written row by row into a stream, so an export never holds
// the whole file in memory: rows come from the database a batch at a time and
// the writer waits whenever the client reads slower than the database answers.

/** A cell: quoted when it holds a comma, quote or line break; spreadsheet formulas are defused. */
export function csvCell(value: unknown): string {
  if (value === null || value === undefined) return '';
  let text = value instanceof Date ? value.toISOString() : String(value);
  // A cell starting with = + - @ (or a tab or CR) runs as a formula in spreadsheet programs.
  if (typeof value === 'string' && /^[=+\-@\t\r]/.test(text)) text = `'${text}`;
  // Quoted on `;` and tab as well: spreadsheets in many locales split on those,
  // and `x;=1+1` would then start a cell with a formula.
  return /[",;\t\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

export const csvLine = (values: unknown[]) => `${values.map(csvCell).join(',')}\r\n`;

export interface CsvSink {
  /** Writes a line; resolves when the client can take more. False when the client has gone. */
  write(values: unknown[]): Promise<boolean>;
}

/**
 * The UTF-8 byte order mark every export starts with. Excel on Windows reads
 * a double-clicked CSV without it in the ANSI code page (`Zoë` showed as
 * `ZoÃ«`); with it, as UTF-8. Every export has it, ASCII-only ones too, so a
 * program reading any of them strips it the same way (Python's `utf-8-sig`,
 * most CSV libraries do so themselves).
 */
export const UTF8_BOM = '\uFEFF';

/**
 * A stream to send as the reply, and `fill` run in the background to write
 * into it. A failure after the first byte cannot change the status any more:
 * the stream is destroyed, so the client sees a cut download, not a short file.
 */
export function csvStream(header: string[], fill: (sink: CsvSink) => Promise<void>, onError: (error: unknown) => void): Readable {
  const stream = new PassThrough();
  stream.write(UTF8_BOM + csvLine(header));
  const gone = () => stream.destroyed || stream.writableEnded;
  const sink: CsvSink = {
    async write(values) {
      if (gone()) return false;
      if (stream.write(csvLine(values))) return true;
      await new Promise<void>((resolve) => {
        const done = () => {
          stream.off('drain', done);
          stream.off('close', done);
          resolve();
        };
        stream.on('drain', done);
        stream.on('close', done);
      });
      return !gone();
    },
  };
  fill(sink).then(
    () => stream.end(),
    (error) => {
      onError(error);
      stream.destroy(error instanceof Error ? error : new Error(String(error)));
    },
  );
  return stream;
}

// A streamed export read through a cursor (the analytics series; the feedback
// export reads in chunks, each a transaction of its own) holds a pooled
// connection and an open transaction for as long as it waits on its client.
// A client that stays connected but stops reading (a paused download, a link
// that died without a reset) would hold both for as long as the socket lives: four of them took a
// pool of four. So a download is cut when the client has not taken the last
// write within `stallMs`, or when it has run past `maxMs` in all; cutting the
// response ends the stream, the export's loop sees it and its transaction ends.
// On shutdown a download gets a share of the deadline, not these limits: the
// process cuts it when that share is spent (plugins/graceful.ts, server.ts).

/** A whole export may take this long: the feedback table exports in seconds, so only a crawling client gets near it. */
export const DOWNLOAD_MAX_MS = 15 * 60_000;

export interface DownloadLimits {
  /** Longest the client may leave a write untaken. */
  stallMs: number;
  maxMs?: number;
}

/** Watches `reply`'s response from now on and cuts it (logged once, at warn) past either limit. */
export function cutDownloadWhenStalled(reply: FastifyReply, { stallMs, maxMs = DOWNLOAD_MAX_MS }: DownloadLimits): void {
  const response = reply.raw;
  let behindSince: number | undefined;
  const cut = (reason: string, details: Record<string, number>) => {
    stopWatching();
    if (response.destroyed) return;
    reply.log.warn(details, `download cut: ${reason}`);
    response.destroy();
  };
  // writableNeedDrain: a write was refused a place in the buffer and the client has not taken it since.
  const check = setInterval(() => {
    if (!response.writableNeedDrain) return void (behindSince = undefined);
    behindSince ??= Date.now();
    if (Date.now() - behindSince >= stallMs) cut('the client stopped reading', { stallMs });
  }, Math.max(10, Math.floor(stallMs / 4))).unref();
  const deadline = setTimeout(() => cut('it took too long', { maxMs }), maxMs).unref();
  const onDrain = () => (behindSince = undefined);
  response.on('drain', onDrain);
  function stopWatching() {
    clearInterval(check);
    clearTimeout(deadline);
    response.off('drain', onDrain);
  }
  response.once('finish', stopWatching);
  response.once('close', stopWatching);
}

/**
 * Sends `body` as a CSV download, cut when the client stalls past `limits`.
 * The reply is taken untyped: route schemas describe the body as text.
 */
export function sendCsv(reply: FastifyReply, filename: string, body: Readable, limits: DownloadLimits): FastifyReply {
  cutDownloadWhenStalled(reply, limits);
  return reply
    .type('text/csv; charset=utf-8')
    .header('content-disposition', `attachment; filename="${filename}"`)
    .header('cache-control', 'no-store')
    .send(body);
}
