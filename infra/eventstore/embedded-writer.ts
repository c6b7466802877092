/**
 * Worker thread that owns the event log's write connection. A commit's fsync blocks only this thread,
 * so the HTTP event loop keeps accepting (and batching) requests while the previous batch is made durable.
 */
import Database from 'better-sqlite3';
import { parentPort, workerData } from 'node:worker_threads';
import { Appender, openWritable, type AppendRequest } from './embedded-appender.js';

const db = new Database((workerData as { file: string }).file);
openWritable(db);
const appender = new Appender(db);

parentPort!.on('message', (message: { id: number; batch: AppendRequest[] } | { close: true }) => {
  if ('close' in message) {
    db.close();
    parentPort!.postMessage({ closed: true });
    return;
  }
  parentPort!.postMessage({ id: message.id, ...appender.commit(message.batch) });
});
