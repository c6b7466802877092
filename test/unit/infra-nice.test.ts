import { existsSync, readlinkSync } from 'node:fs';
import { getPriority, setPriority } from 'node:os';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { once } from 'node:events';
import { lowerThreadPriority } from '../../infra/nice.js';
import { startWorker } from '../../infra/threads.js';

/** This file is also the worker: it starts at nice `from`, lowers itself by `by`, and reports. */
const threadId = () => Number(readlinkSync('/proc/thread-self').split('/').pop());

if (!isMainThread) {
  const { from, by } = workerData as { from: number; by: number };
  setPriority(threadId(), from);
  const lowered = lowerThreadPriority(by);
  parentPort!.postMessage({ lowered, nice: getPriority(threadId()) });
} else {
  const { default: t } = await import('tap');
  const inThread = async (from: number, by: number) => {
    const worker = startWorker(import.meta.url, './infra-nice.test', { from, by });
    const [result] = await once(worker, 'message') as [{ lowered: boolean; nice: number }];
    await worker.terminate();
    return result;
  };

  t.test('a thread is lowered relative to where it runs, never raised', { skip: existsSync('/proc/thread-self') ? false : 'no /proc/thread-self here' }, async (t) => {
    // A server started under `nice -n 5` with PROJECTIONS_NICE=3: its projection thread goes to 8, not to 3.
    t.same(await inThread(5, 3), { lowered: true, nice: 8 }, 'from nice 5, lowered by 3');
    t.same(await inThread(0, 7), { lowered: true, nice: 7 }, 'from nice 0, lowered by 7');
    t.same(await inThread(15, 10), { lowered: true, nice: 19 }, 'capped at the lowest priority (19)');
    t.same(await inThread(19, 10), { lowered: false, nice: 19 }, 'already at the lowest: nothing to do');
    t.same(await inThread(4, 0), { lowered: false, nice: 4 }, 'by 0: left alone');
  });
}
