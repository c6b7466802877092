/**
 * Worker thread that owns the event log's write connection. A commit's fsync blocks only this thread,
 * so the HTTP event loop keeps accepting (and batching) requests while the previous batch is made durable.
 * After each commit that wrote events it tells every other thread of the process that reads this log
 * (the projection thread's subscriptions) on a BroadcastChannel, so they need not poll.
 */
import Database from 'better-sqlite3';
import { BroadcastChannel, parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { Appender, openWritable, type AppendRequest } from './embedded-appender.js';
import { startCheckpointer, stopCheckpointer, truncateWal } from '../threads.js';
import { appendChannelName } from './embedded-channel.js';

/** How often the checkpointer thread moves the log's WAL into the database file. */
const CHECKPOINT_INTERVAL_MS = 100;

const { file } = workerData as { file: string };
const db = new Database(file);
openWritable(db);
// Checkpoints (copying the WAL into the database, with an fsync) run on their own thread, not inside this
// thread's commits; a rare one here (every 16,384 pages of WAL: 16 MiB with 1 KiB pages, see infra/page-size.ts)
// keeps the WAL bounded under steady writes. A WAL past 64 MiB that the checkpointer has copied is truncated here,
// between commits (commit is synchronous, so the request runs after one), not by the checkpointer's low-priority
// thread, which would hold the appends' lock meanwhile.
db.pragma('wal_autocheckpoint = 16384');
const checkpointer = startCheckpointer(file, CHECKPOINT_INTERVAL_MS, { truncate: () => truncateWal(db) });
const appender = new Appender(db);
const channel = new BroadcastChannel(appendChannelName(file));
channel.unref();

type Message = { id: number; batch: AppendRequest[] } | { close: true };
const port = parentPort!;

/**
 * Group commit: the batches that queued up while the previous transaction was being made durable are
 * committed together, in arrival order, in one transaction (one fsync); each batch gets its own reply.
 */
port.on('message', (first: Message) => {
  const batches: Array<{ id: number; batch: AppendRequest[] }> = [];
  let close = false;
  for (let message: Message | undefined = first; message; message = receiveMessageOnPort(port)?.message as Message | undefined) {
    if ('close' in message) {
      close = true;
      break;
    }
    batches.push(message);
  }
  if (batches.length > 0) {
    const requests = batches.length === 1 ? batches[0]!.batch : batches.flatMap((b) => b.batch);
    const result = appender.commit(requests);
    let at = 0;
    for (const { id, batch } of batches) {
      port.postMessage({ id, outcomes: result.outcomes.slice(at, at + batch.length), head: result.head, recorded_at: result.recorded_at });
      at += batch.length;
    }
    if (result.head > 0) channel.postMessage(result.head);
  }
  if (close) void shutdown();
});

async function shutdown(): Promise<void> {
  await stopCheckpointer(checkpointer);
  try {
    truncateWal(db); // the checkpointer's last checkpoint takes no writers' lock
  } catch { /* best effort on shutdown */ }
  db.close();
  channel.close();
  port.postMessage({ closed: true });
}
