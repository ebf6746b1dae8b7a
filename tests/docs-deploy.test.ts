import { readFileSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config.ts';
import { SUBMIT_BODY_LIMIT } from '../src/modules/feedback/routes.ts';
import { requestIdFor } from '../src/plugins/request-log.ts';

// docs/deploy.md's nginx and systemd examples carry figures taken from the
// code. Each is read back here, so a change to the code that the example no
// longer fits (a larger screenshot limit, a longer shutdown) fails a test
// instead of leaving an operator with refused uploads or killed shutdowns.

const root = join(import.meta.dirname, '..');
const guide = readFileSync(join(root, 'docs/deploy.md'), 'utf8');

function fenced(language: string): string {
  const block = new RegExp('```' + language + '\\n([\\s\\S]*?)```').exec(guide);
  if (!block) throw new Error(`docs/deploy.md has no ${language} block`);
  return block[1];
}

const nginx = fenced('nginx');
const unit = fenced('ini');
const MIB = 1024 * 1024;

describe('docs/deploy.md', () => {
  it("nginx's client_max_body_size lets the feedback route's largest body through, and the text names that limit", () => {
    const [, megabytes] = /client_max_body_size (\d+)m;/.exec(nginx) ?? [];
    expect(Number(megabytes) * MIB).toBeGreaterThanOrEqual(SUBMIT_BODY_LIMIT);
    expect(guide).toContain(SUBMIT_BODY_LIMIT.toLocaleString('en-US'));
  });

  it("nginx's request id is one the app keeps", () => {
    expect(nginx).toContain('proxy_set_header X-Request-Id $request_id;');
    const nginxRequestId = 'f'.repeat(32); // $request_id: 32 hex characters
    expect(requestIdFor({ headers: { 'x-request-id': nginxRequestId } } as unknown as IncomingMessage)).toBe(nginxRequestId);
  });

  it("the unit's TimeoutStopSec outlasts the shutdown's own deadline, and ExecStart runs what npm start runs", () => {
    const config = parseConfig({ NODE_ENV: 'test', DATABASE_URL: 'postgres://x@127.0.0.1/x' });
    const [, seconds] = /^TimeoutStopSec=(\d+)$/m.exec(unit) ?? [];
    expect(Number(seconds) * 1000).toBeGreaterThan(config.SHUTDOWN_DELAY_MS + config.SHUTDOWN_TIMEOUT_MS);
    const start: string = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).scripts.start;
    const [, execStart] = /^ExecStart=\S*\/node_modules\/\.bin\/(node .*)$/m.exec(unit) ?? [];
    expect(execStart).toBe(start.replace(/^exec /, ''));
  });
});
