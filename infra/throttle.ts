/**
 * At most one pass per key per interval. Only keys that passed within the last interval are remembered
 * (the others would pass anyway), so the memory is bounded by the keys active in one interval, not by
 * every key ever seen. `now` is wall-clock time and may step back (NTP): a key that passed "in the future"
 * passes again, rather than being held back until the clock catches up.
 */
export class Throttle {
  /** key → when it last passed, oldest first (a pass moves its key to the end). */
  private readonly passed = new Map<string, number>();

  constructor(private readonly intervalMs: number) {}

  pass(key: string, now: number): boolean {
    const before = this.passed.get(key);
    if (before !== undefined && this.recent(before, now)) return false;
    this.passed.delete(key);
    this.passed.set(key, now);
    for (const [old, at] of this.passed) {
      if (this.recent(at, now)) break;
      this.passed.delete(old);
    }
    return true;
  }

  /** Whether a pass at `at` holds a key back at `now`. */
  private recent(at: number, now: number): boolean {
    return at <= now && now - at < this.intervalMs;
  }

  /** Keys remembered now. */
  get size(): number {
    return this.passed.size;
  }
}
