/**
 * Another connection swapping rebuilt generations in while a test reads (the projection thread finishing a
 * rebuild, or `ops projections rebuild`, beside the server answering queries). Each rebuild fills the
 * collection with the same documents, so the live data never changes: only the generation holding it.
 */
import { on } from 'node:events';
import { startWorker } from '../../infra/threads.js';
import type { ProjectionWriter, ReadStore } from '../../infra/readstore/port.js';

/** Projection `projection` owns `collection`, which holds `{id: 'd<i>', n: i}` at position i + 1 for i < docs. */
export interface SwapSpec {
  projection: string;
  collection: string;
  docs: number;
}

export interface Swapper {
  /** Stops swapping (closing the other connection) and tells how many generations were swapped in. */
  stop(): Promise<number>;
}

/** Writes the documents of `spec`, in a live batch (to set up) or a rebuild batch. */
export async function putDocs(w: ProjectionWriter, spec: SwapSpec): Promise<void> {
  for (let i = 0; i < spec.docs; i++) await w.put(spec.collection, { id: `d${i}`, n: i }, i + 1);
}

/** Rebuilds and swaps in one generation after another until `stopped()`; resolves to how many were swapped in. */
export async function swapGenerations(store: ReadStore, spec: SwapSpec, stopped: () => boolean): Promise<number> {
  let swaps = 0;
  while (!stopped()) {
    const start = await store.startRebuild(spec.projection);
    await store.applyBatch(spec.projection, start, spec.docs, (w) => putDocs(w, spec), { rebuild: true });
    if ((await store.finishRebuild(spec.projection, { generation: start.generation })).swapped) swaps++;
    // Lets the stop message in (in a worker) or other work of this thread run (with an async adapter).
    await new Promise((resolve) => setImmediate(resolve));
  }
  return swaps;
}

/**
 * Swaps on `store`, a second connection in this thread: enough for an adapter whose calls are asynchronous
 * I/O (MongoDB), since the test's reads run in between. `stop()` closes `store`.
 */
export function swapOn(store: ReadStore, spec: SwapSpec): Swapper {
  let stopped = false;
  const swaps = swapGenerations(store, spec, () => stopped);
  swaps.catch(() => undefined); // reported by stop(); not an unhandled rejection before it is called
  return {
    async stop() {
      stopped = true;
      try {
        return await swaps;
      } finally {
        await store.close();
      }
    },
  };
}

/**
 * Swaps on a connection of its own to the embedded read store `file`, in a worker thread: the embedded
 * store's calls run synchronously, so a second connection in this thread never gets between the steps
 * of a read. Resolves once the worker has opened its connection.
 */
export async function swapInThread(file: string, spec: SwapSpec): Promise<Swapper> {
  const worker = startWorker(import.meta.url, './generation-swapper-thread', { file, spec });
  // Listens for the worker's 'error' from now on: a failed swap is thrown by the next message read.
  const messages = on(worker, 'message');
  await messages.next();
  return {
    async stop() {
      worker.postMessage('stop');
      try {
        const { value: [{ swaps }] } = (await messages.next()) as IteratorResult<[{ swaps: number }]>;
        return swaps;
      } finally {
        await messages.return?.();
        await worker.terminate();
      }
    },
  };
}
