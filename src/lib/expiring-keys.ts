// Keys remembered until a deadline, at most `maxKeys` of them: the auth
// context's "session seen alive" cache. A Map keeps insertion order, so when
// it is full the oldest key goes first; expired keys are dropped as they are
// met. Without the bound, every distinct valid session would stay in memory
// for the life of the process.

export class ExpiringKeys {
  private readonly until = new Map<string, number>();
  readonly maxKeys: number;

  constructor(maxKeys: number) {
    this.maxKeys = maxKeys;
  }

  get size(): number {
    return this.until.size;
  }

  has(key: string, now = Date.now()): boolean {
    const deadline = this.until.get(key);
    if (deadline === undefined) return false;
    if (deadline > now) return true;
    this.until.delete(key);
    return false;
  }

  add(key: string, ttlMs: number, now = Date.now()): void {
    // Re-inserting moves the key to the young end.
    this.until.delete(key);
    while (this.until.size >= this.maxKeys) {
      const oldest = this.until.keys().next().value as string;
      this.until.delete(oldest);
    }
    this.until.set(key, now + ttlMs);
  }

  delete(key: string): void {
    this.until.delete(key);
  }
}
