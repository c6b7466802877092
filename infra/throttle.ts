/**
 * At most one pass per key per interval. Only keys that passed within the last interval are remembered
 * (the others would pass anyway), so the memory is bounded by the keys active in one interval, not by
 * every key ever seen.
 */
export class Throttle {
  /** key → when it last passed, oldest first (a pass moves its key to the end). */
  private readonly passed = new Map<string, number>();

  constructor(private readonly intervalMs: number) {}

  pass(key: string, now: number): boolean {
    const before = this.passed.get(key);
    if (before !== undefined && now - before < this.intervalMs) return false;
    this.passed.delete(key);
    this.passed.set(key, now);
    for (const [old, at] of this.passed) {
      if (now - at < this.intervalMs) break;
      this.passed.delete(old);
    }
    return true;
  }

  /** Keys remembered now. */
  get size(): number {
    return this.passed.size;
  }
}
