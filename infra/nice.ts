import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';

/**
 * Lowers the calling thread's scheduling priority by `nice` (0–19). On Linux every thread is a task with
 * its own nice value, found through /proc/thread-self; lowering needs no privilege. Elsewhere (or if
 * /proc is not mounted) it does nothing and answers false.
 */
export function lowerThreadPriority(nice: number): boolean {
  if (nice <= 0) return false;
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (!Number.isInteger(tid) || tid <= 0) return false;
    setPriority(tid, nice);
    return true;
  } catch {
    return false;
  }
}
