/**
 * A worker for test/unit/readstore-swap.test.ts: on its own connection to the embedded read store, swaps
 * rebuilt generations of projection `p` in (each dropping the previous one's tables) until told to stop.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';

const { file, docs } = workerData as { file: string; docs: number };
const store = new EmbeddedReadStore(file, { checkpointer: false });
let stop = false;
parentPort!.on('message', () => { stop = true; });
let swaps = 0;
parentPort!.postMessage({ started: true });
while (!stop) {
  const start = await store.startRebuild('p');
  await store.applyBatch('p', { position: start.position, generation: start.generation }, docs, async (w) => {
    for (let i = 0; i < docs; i++) await w.put('items', { id: `d${i}`, n: i }, i + 1);
  }, { rebuild: true });
  const { swapped } = await store.finishRebuild('p');
  if (swapped) swaps++;
  await new Promise((resolve) => setImmediate(resolve));
}
await store.close();
parentPort!.postMessage({ swaps });
