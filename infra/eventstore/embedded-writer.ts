/**
 * Worker thread that owns the event log's write connection. A commit's fsync blocks only this thread,
 * so the HTTP event loop keeps accepting (and batching) requests while the previous batch is made durable.
 * After each commit that wrote events it tells every other thread of the process that reads this log
 * (the projection thread's subscriptions) on a BroadcastChannel, so they need not poll.
 */
import Database from 'better-sqlite3';
import { BroadcastChannel, parentPort, workerData } from 'node:worker_threads';
import { Appender, openWritable, type AppendRequest } from './embedded-appender.js';
import { appendChannelName } from './embedded-channel.js';

const { file } = workerData as { file: string };
const db = new Database(file);
openWritable(db);
const appender = new Appender(db);
const channel = new BroadcastChannel(appendChannelName(file));
channel.unref();

parentPort!.on('message', (message: { id: number; batch: AppendRequest[] } | { close: true }) => {
  if ('close' in message) {
    db.close();
    channel.close();
    parentPort!.postMessage({ closed: true });
    return;
  }
  const result = appender.commit(message.batch);
  parentPort!.postMessage({ id: message.id, ...result });
  if (result.head > 0) channel.postMessage(result.head);
});
