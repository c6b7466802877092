/**
 * Worker thread that checkpoints a SQLite file's WAL into the database (the event log, the read models).
 * A checkpoint copies pages and fsyncs, so doing it here keeps that work out of the commits of the
 * writing connection (whose automatic checkpoints are set to run only rarely). PASSIVE never blocks it.
 */
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';
import { lowerThreadPriority } from './nice.js';

// Housekeeping: a checkpoint may run late, so it yields the CPU to the threads that answer requests.
lowerThreadPriority(10);

const { file, intervalMs } = workerData as { file: string; intervalMs: number };
const db = new Database(file);
db.pragma('busy_timeout = 5000');
const checkpoint = db.prepare('PRAGMA wal_checkpoint(PASSIVE)');
const timer = setInterval(() => {
  try {
    checkpoint.run();
  } catch {
    // Busy or locked: the next tick tries again.
  }
}, intervalMs);

parentPort!.on('message', () => {
  clearInterval(timer);
  try { db.pragma('wal_checkpoint(TRUNCATE)'); } catch { /* best effort on shutdown */ }
  db.close();
  parentPort!.postMessage('closed');
});
