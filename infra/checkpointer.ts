/**
 * Worker thread that checkpoints a SQLite file's WAL into the database (the event log, the read models).
 * A checkpoint copies pages and fsyncs, so doing it here keeps that work out of the commits of the
 * writing connection (whose automatic checkpoints are set to run only rarely). PASSIVE never blocks it.
 *
 * Cutting a WAL that grew past its limit back to nothing (a TRUNCATE checkpoint) takes the writers' lock, and this
 * thread runs at the lowest priority: one descheduled while it held that lock (under load, for seconds) made the
 * writers wait out their busy timeout and fail with SQLITE_BUSY. So it only says when the WAL is due (a 'truncate'
 * message), and the writing thread truncates it between its own transactions (startCheckpointer, truncateWal).
 *
 * The thread never dies of an error: one it cannot open its file with, or a checkpoint's that is not
 * mere contention (disk full, I/O error), is logged, and a close is still answered, since the thread
 * that started it waits for that answer.
 */
import Database from 'better-sqlite3';
import { statSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { pino } from 'pino';
import { createLogger } from './logger.js';
import { lowerThreadPriority } from './nice.js';
import { isContention } from './threads.js';
import { Throttle } from './throttle.js';

// Housekeeping: a checkpoint may run late, so it yields the CPU to the threads that answer requests.
lowerThreadPriority(10);

/** A WAL file larger than this, once wholly copied, is due to be cut back to nothing (see overLimit). */
const WAL_LIMIT_BYTES = 64 * 1024 * 1024;
/** The same failure is logged at most once a minute. */
const FAILURE_LOG_INTERVAL_MS = 60_000;

const { file, intervalMs, walLimitBytes = WAL_LIMIT_BYTES, logLevel } = workerData as { file: string; intervalMs: number; walLimitBytes?: number; logLevel?: string };
// Written at once (it logs rarely): a line still being written when the thread is terminated would be lost.
const log = createLogger(logLevel, { destination: pino.destination({ dest: 1, sync: true }) }).child({ thread: 'checkpointer', file });
const failures = new Throttle(FAILURE_LOG_INTERVAL_MS);
const failed = (error: unknown, what: string) => {
  const code = (error as { code?: unknown })?.code;
  if (failures.pass(`${what}:${String(code)}`, Date.now())) log.error({ err: error }, `could not ${what}`);
};

let db: Database.Database | undefined;
let timer: NodeJS.Timeout | undefined;
try {
  db = new Database(file, { fileMustExist: true });
  db.pragma('busy_timeout = 5000');
  const checkpoint = db.prepare<[], { busy: number; log: number; checkpointed: number }>('PRAGMA wal_checkpoint(PASSIVE)');
  timer = setInterval(() => {
    try {
      const result = checkpoint.get()!;
      if (result.busy === 0 && result.log >= 0 && result.checkpointed === result.log && overLimit()) parentPort!.postMessage('truncate');
    } catch (error) {
      // Busy or locked: the next tick tries again.
      if (!isContention(error)) failed(error, 'checkpoint the WAL');
    }
  }, intervalMs);
} catch (error) {
  failed(error, 'open the database to checkpoint it');
}

/**
 * Every frame of the WAL is in the database now, but the file keeps the size it grew to (a long read lets
 * it grow without bound: no checkpoint can pass that reader's snapshot), since the writers reuse it from
 * its start. A large one is due to be truncated (by the writing thread: see above).
 */
function overLimit(): boolean {
  try {
    return statSync(`${file}-wal`).size > walLimitBytes;
  } catch {
    return false;
  }
}

parentPort!.on('message', () => {
  clearInterval(timer);
  if (db) {
    // Best effort, without waiting, and without the writers' lock (their connection truncates the WAL at close).
    try {
      db.pragma('busy_timeout = 0');
      db.pragma('wal_checkpoint(PASSIVE)');
    } catch { /* best effort on shutdown */ }
    db.close();
  }
  parentPort!.postMessage('closed');
});
