import { readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';

/** The lowest scheduling priority (highest nice value) there is. */
const LOWEST = 19;

/**
 * Lowers the calling thread's scheduling priority by `nice` (0–19), relative to where it runs now: under
 * `nice -n 5`, lowering by 3 gives 8, not 3 (which would be raising it: refused without privilege, and
 * wrong with it). On Linux every thread is a task with its own nice value, found through /proc/thread-self;
 * lowering needs no privilege. Elsewhere (or if /proc is not mounted, or the thread is already at the
 * lowest priority) it does nothing and answers false.
 */
export function lowerThreadPriority(nice: number): boolean {
  if (nice <= 0) return false;
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid) || tid <= 0) return false;
    const current = getPriority(tid);
    const lowered = Math.min(LOWEST, current + nice);
    if (lowered <= current) return false;
    setPriority(tid, lowered);
    return true;
  } catch {
    return false;
  }
}
