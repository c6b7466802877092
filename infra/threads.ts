import { Worker } from 'node:worker_threads';
import { createLogger } from './logger.js';

/**
 * Starts a worker thread from a module next to `importMetaUrl` (given without extension). When running
 * from TypeScript sources (tsx, tap), the worker registers tsx's loader before importing the module,
 * since loader hooks registered in this thread do not carry over to workers. tsx is resolved from this
 * module, not from the working directory (where an eval worker would look for it): a server started from
 * another directory (`/opt/cairn/node_modules/.bin/tsx /opt/cairn/api/main.ts`) starts its threads too.
 */
export function startWorker(importMetaUrl: string, relativePath: string, workerData: unknown): Worker {
  const fromSources = importMetaUrl.endsWith('.ts');
  const module = new URL(`${relativePath}${fromSources ? '.ts' : '.js'}`, importMetaUrl);
  if (!fromSources) return new Worker(module, { workerData });
  const bootstrap = `import(${JSON.stringify(import.meta.resolve('tsx/esm/api'))}).then((tsx) => { tsx.register(); return import(${JSON.stringify(module.href)}); })`;
  return new Worker(bootstrap, { eval: true, workerData });
}

/**
 * The WAL checkpointer thread of a SQLite file (checkpointer.ts). It does not hold the process open. It logs its
 * own errors and does not die of them; one that dies all the same (a resource limit) is logged here rather than
 * crashing this thread, and leaves the WAL to the writers' own, rarer checkpoints.
 */
export function startCheckpointer(file: string, intervalMs: number): Worker {
  const worker = startWorker(import.meta.url, './checkpointer', { file, intervalMs });
  worker.on('error', (error) => createLogger().error({ err: error, file }, 'the WAL checkpointer thread died'));
  worker.unref();
  return worker;
}

/** Asks a checkpointer thread to checkpoint and close its file, waits for its answer (or its end), then ends it. */
export async function stopCheckpointer(worker: Worker): Promise<void> {
  // threadId is -1 once the thread has ended: no answer, and no 'exit' either, would come.
  if (worker.threadId === -1) return;
  worker.ref();
  await new Promise<void>((resolve) => {
    worker.once('message', () => resolve());
    worker.once('exit', () => resolve());
    worker.postMessage('close');
  });
  await worker.terminate();
}
