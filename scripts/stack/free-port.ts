import { createServer } from 'node:net';

/** A port nothing listens on now (the OS picks it), for a child process to take. */
export async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as { port: number };
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

/**
 * Rejects with the listen error (EADDRINUSE when something listens there)
 * unless `port` on `host` can be taken now, for a child process that would
 * otherwise find out only after everything else has started.
 */
export async function ensurePortFree(port: number, host: string): Promise<void> {
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once('error', reject);
    probe.listen(port, host, resolve);
  });
  await new Promise((resolve) => probe.close(resolve));
}
