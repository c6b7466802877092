/** The worker thread of swapInThread (generation-swapper.ts): swaps on its own connection until told to stop. */
import { parentPort, workerData } from 'node:worker_threads';
import { EmbeddedReadStore } from '../../infra/readstore/embedded.js';
import { swapGenerations, type SwapSpec } from './generation-swapper.js';

const { file, spec } = workerData as { file: string; spec: SwapSpec };
const store = new EmbeddedReadStore(file, { checkpointer: false });
let stop = false;
parentPort!.on('message', () => { stop = true; });
parentPort!.postMessage({ started: true });
const swaps = await swapGenerations(store, spec, () => stop);
await store.close();
parentPort!.postMessage({ swaps });
