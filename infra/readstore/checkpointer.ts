/**
 * Worker thread that checkpoints the read-model file's WAL into the database. A checkpoint fsyncs, so
 * doing it here keeps that wait off the thread that serves HTTP and applies projections (whose own
 * connection has automatic checkpoints turned off). PASSIVE never blocks that connection.
 */
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';

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
