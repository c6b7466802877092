import type Database from 'better-sqlite3';
import { Worker } from 'node:worker_threads';
import { createLogger } from './logger.js';
import { Throttle } from './throttle.js';

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

/** SQLite's "another connection is in the way" (SQLITE_BUSY, SQLITE_LOCKED and their extended codes): tried again later. */
export const isContention = (error: unknown): boolean =>
  ['SQLITE_BUSY', 'SQLITE_LOCKED'].some((code) => String((error as { code?: unknown } | null)?.code).startsWith(code));

/** A failure to truncate a WAL is logged at most once a minute (per file and error code). */
const truncateFailures = new Throttle(60_000);

/**
 * The WAL checkpointer thread of a SQLite file (checkpointer.ts). It does not hold the process open. It logs its
 * own errors and does not die of them; one that dies all the same (a resource limit) is logged here rather than
 * crashing this thread, and leaves the WAL to the writers' own, rarer checkpoints.
 *
 * `truncate`: the thread that writes the file cuts a WAL that grew past `walLimitBytes` back to nothing, when the
 * checkpointer has copied all of it (truncateWal on its own connection, between its transactions: a TRUNCATE
 * checkpoint holds the writers' lock, which the checkpointer's thread, at the lowest priority, could hold for
 * seconds while descheduled under load). One request at a time; one that fails on contention is made again later.
 */
export function startCheckpointer(file: string, intervalMs: number,
  options: { truncate: () => void | Promise<void>; walLimitBytes?: number }): Worker {
  const { truncate, walLimitBytes } = options;
  const worker = startWorker(import.meta.url, './checkpointer', { file, intervalMs, walLimitBytes });
  worker.on('error', (error) => createLogger().error({ err: error, file }, 'the WAL checkpointer thread died'));
  let truncating = false;
  worker.on('message', (message: unknown) => {
    if (message !== 'truncate' || truncating) return;
    truncating = true;
    Promise.resolve().then(truncate).catch((error: unknown) => {
      const code = String((error as { code?: unknown } | null)?.code);
      if (isContention(error) || !truncateFailures.pass(`${file}:${code}`, Date.now())) return;
      createLogger().error({ err: error, file }, 'could not truncate the WAL');
    }).finally(() => { truncating = false; });
  });
  worker.unref();
  return worker;
}

/**
 * A WAL checkpoint that also cuts the WAL file back to nothing, for the connection that writes the file (see
 * startCheckpointer), between its transactions. It waits for no one: a reader (or another process's writer) in the
 * way leaves it for the next request.
 */
export function truncateWal(db: Database.Database): void {
  if (!db.open || db.inTransaction) return;
  const timeout = db.pragma('busy_timeout', { simple: true }) as number;
  db.pragma('busy_timeout = 0');
  try {
    db.pragma('wal_checkpoint(TRUNCATE)');
  } finally {
    db.pragma(`busy_timeout = ${timeout}`);
  }
}

/** Asks a checkpointer thread to checkpoint and close its file, waits for its answer (or its end), then ends it. */
export async function stopCheckpointer(worker: Worker): Promise<void> {
  // threadId is -1 once the thread has ended: no answer, and no 'exit' either, would come.
  if (worker.threadId === -1) return;
  worker.ref();
  await new Promise<void>((resolve) => {
    // Its other messages ('truncate': the WAL is due) are not the answer.
    const answered = (message: unknown) => {
      if (message !== 'closed') return;
      worker.off('message', answered);
      resolve();
    };
    worker.on('message', answered);
    worker.once('exit', () => resolve());
    worker.postMessage('close');
  });
  await worker.terminate();
}
