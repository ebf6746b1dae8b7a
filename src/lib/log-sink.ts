import type { LogLevel } from '../logger.ts';
import { hasUnstorableEscape, storableText } from './schemas.ts';

// The pino destination behind stored server logs. `write` runs inside the
// logging call, so it only queues the line; a plugin drains the queue in
// batches off the request path (modules/logs/worker.ts). A full queue drops the
// newest lines and counts them rather than grow or block.

export interface ServerLogEntry {
  level: LogLevel;
  message: string;
  context: Record<string, unknown>;
  requestId: string | null;
  createdAt: string;
}

const MAX_MESSAGE = 10_000;
const MAX_CONTEXT = 16_000;
// pino's own fields, and ours that say where a line came from.
const NOT_CONTEXT = new Set(['level', 'time', 'pid', 'hostname', 'msg', 'requestId', 'persist']);

export class LogSink {
  private queue: string[] = [];
  /** Lines refused because the queue was full. */
  dropped = 0;

  readonly maxQueue: number;

  constructor(maxQueue = 1_000) {
    this.maxQueue = maxQueue;
  }

  write(line: string): void {
    if (this.queue.length >= this.maxQueue) {
      this.dropped += 1;
      return;
    }
    this.queue.push(line);
  }

  get queued(): number {
    return this.queue.length;
  }

  /** Takes up to `max` queued lines, oldest first, as entries to store. */
  take(max: number): ServerLogEntry[] {
    const lines = this.queue.splice(0, max);
    const entries: ServerLogEntry[] = [];
    for (const line of lines) {
      const entry = parseLine(line);
      if (entry) entries.push(entry);
    }
    return entries;
  }
}

function levelName(level: number): LogLevel {
  if (level >= 50) return 'error';
  if (level >= 40) return 'warn';
  if (level >= 30) return 'info';
  if (level >= 25) return 'http';
  return 'debug';
}

/** One pino JSON line as a stored entry; lines marked `persist: false` (the sink's own failures) are skipped. */
export function parseLine(line: string): ServerLogEntry | undefined {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (record.persist === false || typeof record.level !== 'number') return undefined;
  let context: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(record)) if (!NOT_CONTEXT.has(key)) context[key] = value;
  const serialized = JSON.stringify(context);
  // jsonb refuses NUL and unpaired surrogates, and one such entry would fail
  // its whole batch: such a context, like a long one, is kept as text, cut
  // whole characters at a time.
  if (serialized.length > MAX_CONTEXT || hasUnstorableEscape(serialized)) {
    context = { truncated: serialized.length > MAX_CONTEXT, preview: storableText(serialized.slice(0, MAX_CONTEXT)) };
  }
  const errMessage = (record.err as { message?: unknown } | undefined)?.message;
  const message = typeof record.msg === 'string' && record.msg !== '' ? record.msg : typeof errMessage === 'string' ? errMessage : '(no message)';
  return {
    level: levelName(record.level),
    message: storableText(message.slice(0, MAX_MESSAGE)) || '(no message)',
    context,
    requestId: typeof record.requestId === 'string' ? record.requestId.slice(0, 128) : null,
    createdAt: new Date(typeof record.time === 'number' ? record.time : Date.now()).toISOString(),
  };
}
