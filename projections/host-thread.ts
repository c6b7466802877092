/**
 * The projection thread (see host.ts): every projection runner of the server, on this thread's own
 * event-store and read-store connections. It reports to the HTTP thread, once per turn of its event
 * loop, the sink notes of the batches committed (in commit order) and then the positions reached.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { Config } from '../infra/config.js';
import { createLogger } from '../infra/logger.js';
import { lowerThreadPriority } from '../infra/nice.js';
import { openStores } from '../infra/stores.js';
import { describeError, HEARTBEAT_INTERVAL_MS } from './health.js';
import type { ControlRequest, HostReport, SinkNote } from './host.js';
import { allProjections } from './index.js';
import { Reembedder } from './memory/reembed.js';
import type { IndexSink } from './memory/sync.js';
import { ProjectionRunner } from './runner.js';

/**
 * `paused`: projections the host has paused (see ProjectionHost.pause), not started here until resumed. `abandon`: set by a
 * stopping host that waited THREAD_STOP_TIMEOUT_MS for this thread in vain (see endIfAbandoned).
 */
const { config, logLevel, vectors, paused, abandon } = workerData as { config: Config; logLevel: string; vectors: boolean; paused: string[]; abandon: Int32Array };
const log = createLogger(logLevel).child({ thread: 'projections' });
// Under load the HTTP thread and the log's writer (acknowledging writes) go first; the runners catch up
// in the gaps, with larger and so cheaper batches.
lowerThreadPriority(config.projectionsNice);
const port = parentPort!;

type Pending = Required<Pick<HostReport, 'notes' | 'positions' | 'failures'>>;
let pending: Pending | undefined;
const report = (): Pending => {
  if (!pending) {
    pending = { notes: [], positions: {}, failures: {} };
    setImmediate(() => {
      if (!pending) return;
      const message = pending;
      pending = undefined;
      port.postMessage(message satisfies HostReport);
    });
  }
  return pending;
};
const note = (n: SinkNote) => { report().notes.push(n); };
const remote = <Batch>(sink: 'memories' | 'vectors'): IndexSink<Batch[]> => ({
  afterCommit: (batch, generation) => note({ sink, batch, generation }),
  reset: async () => note({ sink, reset: true }),
});

/**
 * Ends this thread once the host has given up waiting for its stop: called before every store call and on every heartbeat,
 * so it comes between two store calls. Ending it from here rather than being terminated from outside: a thread terminated
 * inside a store call that then fails (SQLITE_BUSY once SQLite's busy timeout has passed) aborts the whole process.
 * Nothing half-written stays: the store connections close with the thread, rolling back a batch left open.
 */
function endIfAbandoned(): void {
  if (Atomics.load(abandon, 0) !== 0) process.exit(0);
}
/** `store` with endIfAbandoned before each of its methods. */
function abandonable<T extends object>(store: T): T {
  return new Proxy(store, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key, target);
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        endIfAbandoned();
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
}

const opened = await openStores(config, { checkpointer: true, appends: false });
const [events, reads] = [abandonable(opened.events), abandonable(opened.reads)];
const projections = allProjections(config, {
  keys: (batch) => note({ sink: 'keys', batch }),
  memories: remote('memories'),
  vectors: vectors ? remote('vectors') : undefined,
}, log);
// This thread's store reads announced commits in gathered chunks (at most every 2 ms): a runner takes
// what has arrived and applies it at once, with no second window of its own.
const runners = projections.map((p) => new ProjectionRunner(p, events, reads, log, { batchWindowMs: 0 }));
for (const runner of runners) {
  if (paused.includes(runner.name)) await runner.pause();
  else await runner.start();
  runner.onProgress((position) => { report().positions[runner.name] = position; });
  runner.onFailure((failure) => { report().failures[runner.name] = failure; });
}
// A paused runner has not read its checkpoint: the host keeps what the thread before this one reported.
const running = runners.filter((r) => !r.isPaused);
port.postMessage({
  ready: true,
  notes: pending?.notes ?? [],
  positions: Object.fromEntries(running.map((r) => [r.name, r.currentPosition])),
  failures: Object.fromEntries(running.map((r) => [r.name, r.failure ?? null])),
} satisfies HostReport);
pending = undefined;
// The heartbeat: a report (empty when nothing happened) every interval, so a blocked event loop shows.
const heartbeat = setInterval(() => {
  endIfAbandoned();
  report();
}, HEARTBEAT_INTERVAL_MS);
// Asked for by the HTTP thread; run here rather than there: a rebuild of 100k vectors holds an event loop ~95 ms at a time.
const reembedder = new Reembedder(config, events, reads, log);

port.on('message', async (message: unknown) => {
  if (typeof message === 'object' && message !== null && 'reembed' in message) {
    reembedder.start((message as { reembed: string[] }).reembed);
    return;
  }
  if (typeof message === 'object' && message !== null && 'control' in message) {
    const { id, control, projection } = message as ControlRequest;
    try {
      const runner = runners.find((r) => r.name === projection);
      if (!runner) throw new Error(`unknown projection ${projection}`);
      await (control === 'pause' ? runner.pause() : runner.resume());
      port.postMessage({ controlled: { id } } satisfies HostReport);
    } catch (error) {
      port.postMessage({ controlled: { id, error: describeError(error) } } satisfies HostReport);
    }
    return;
  }
  if (message !== 'stop') return;
  clearInterval(heartbeat);
  await reembedder.stop();
  for (const runner of runners) await runner.stop();
  await reads.close();
  await events.close();
  port.postMessage({ stopped: true } satisfies HostReport);
});
