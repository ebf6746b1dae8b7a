import { Counter, type Registry } from 'prom-client';

/**
 * A Prometheus counter of a total kept elsewhere (a log sink's drops, the
 * process's CPU time): each scrape adds what the total grew by since the
 * last, so nothing is counted on the way and nothing twice.
 */
export function counterOfTotal(name: string, help: string, registers: Registry[], readTotal: () => number): Counter {
  let counted = 0;
  return new Counter({
    name,
    help,
    registers,
    collect() {
      const total = readTotal();
      this.inc(total - counted);
      counted = total;
    },
  });
}
