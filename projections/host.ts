import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { hostname } from 'node:os';
import type { Worker } from 'node:worker_threads';
import type { Config } from '../infra/config.js';
import type { EventStore } from '../infra/eventstore/port.js';
import type { Logger } from '../infra/logger.js';
import type { PauseHolder, PauseRecord, ProjectionFailure, ReadStore } from '../infra/readstore/port.js';
import { startWorker } from '../infra/threads.js';
import { HealthBoard, threadState, type HostHealth } from './health.js';
import { allProjections, type ProjectionSinks } from './index.js';
import { Reembedder } from './memory/reembed.js';
import { ProjectionRunner, waitForPosition } from './runner.js';

/**
 * Where the server's projection runners live. `inline`: in the HTTP thread (simple, and what a
 * debugger sees). `thread` (default): in a worker thread with its own store connections, so applying
 * events and committing read models does not take the HTTP thread's time; the thread reports positions
 * and committed batches (for the in-process indexes and the key cache) back here, in order.
 */
export interface ProjectionHost {
  readonly mode: 'inline' | 'thread';
  readonly names: readonly string[];
  /** The projection thread, in `thread` mode (diagnostics, and the restart test). */
  readonly thread?: Worker;
  /** Applied position of a projection, as this thread knows it. */
  position(name: string): number;
  /** Resolves once `name` has applied everything up to `position`; ConsistencyTimeoutError after `timeoutMs`; `signal`'s reason once it aborts. */
  waitFor(name: string, position: number, timeoutMs: number, signal?: AbortSignal): Promise<void>;
  /** The thread's state and each projection's position, progress and failure (what `/readyz` reports). */
  health(): HostHealth;
  /** Re-embeds vectors of these earlier local embedder models, in the background (see Reembedder); one rebuild at a time. */
  reembed(older: string[]): void;
  /**
   * Stops applying events to `name` until resume(name), e.g. to hold a read model back in a test, or while an operator
   * looks into it: its read model and position stay where they are (a batch being applied is committed first, with
   * its checkpoint), and waits for later positions wait, bounded as ever. A projection thread started to replace one
   * that exited keeps it paused; the host's stop() ends it. Pausing a paused projection does nothing; pauses and
   * resumes take effect in the order called. Resolves once the runner has stopped.
   * While paused it is reported: by health() (`paused_at`: /readyz answers 503 naming it) and beside its checkpoint
   * (ReadStore.recordPause, naming this host: `ops projections status`). A host that stops clears its own records; one
   * that starts clears those of hosts on this machine that no longer run (killed while they held a projection paused),
   * and keeps those of other machines (it cannot tell whether they run; see Pauses.gone).
   */
  pause(name: string): Promise<void>;
  /** Applies events to a paused projection again, from its stored checkpoint; resolves once its runner has started. */
  resume(name: string): Promise<void>;
  stop(): Promise<void>;
}

export interface HostOptions {
  config: Config;
  events: EventStore;
  reads: ReadStore;
  sinks: Required<Pick<ProjectionSinks, 'keys' | 'memories'>> & Pick<ProjectionSinks, 'vectors'>;
  log: Logger;
}

export async function startProjectionHost(options: HostOptions): Promise<ProjectionHost> {
  return options.config.projectionsThread ? ThreadHost.start(options) : InlineHost.start(options);
}

/** The ids of the hosts of this process that have started and not stopped (tests run several in one process). */
const runningHosts = new Set<string>();

/**
 * The projections a host has paused, since when: on its HealthBoard (so /readyz names them) and recorded beside their
 * checkpoints (ReadStore.recordPause) for `ops projections status`, in the order pauses and resumes were called, under
 * this host's own PauseHolder: other hosts on the same read store (servers sharing a DATA_DIR, or a MongoDB) have theirs.
 */
class Pauses {
  private readonly since = new Map<string, string>();
  private writes: Promise<unknown> = Promise.resolve();
  readonly holder: PauseHolder = { host: hostname(), pid: process.pid, id: randomUUID() };

  constructor(private readonly reads: ReadStore, private readonly board: HealthBoard, private readonly log: Logger) {
    runningHosts.add(this.holder.id);
  }

  get names(): string[] { return [...this.since.keys()]; }

  /** A pause (a second one keeps the time of the first) or a resume of `name`, as the host reports it from now on. */
  set(name: string, paused: boolean): void {
    if (!paused) this.since.delete(name);
    else if (!this.since.has(name)) this.since.set(name, new Date().toISOString());
    this.board.paused(name, this.since.get(name) ?? null);
  }

  /** Stores `name`'s state as it is when this write's turn comes: pauses and resumes called at once end with the last. */
  record(name: string): Promise<void> {
    const run = this.writes.then(() => this.reads.recordPause(name, this.holder, this.since.get(name) ?? null))
      .catch((error) => this.log.warn({ err: error, projection: name }, 'could not record the projection\'s pause beside its checkpoint'));
    this.writes = run;
    return run;
  }

  /** At start: records of these projections left by hosts that no longer run (see gone); other hosts' records stay. */
  async clearLeftOver(names: readonly string[]): Promise<void> {
    try {
      for (const cp of await this.reads.listCheckpoints()) {
        if (!names.includes(cp.projection)) continue;
        for (const record of (cp.paused_by ?? []).filter(gone)) await this.reads.recordPause(cp.projection, record, null);
      }
    } catch (error) {
      this.log.warn({ err: error }, 'could not clear pauses recorded by an earlier process');
    }
  }

  /** At stop: this host holds nothing back any more; its records go, other hosts' stay. */
  async clearAll(): Promise<void> {
    runningHosts.delete(this.holder.id);
    const names = this.names;
    this.since.clear();
    for (const name of names) await this.record(name);
  }
}

/**
 * Whether the host that recorded a pause no longer runs: one of this process that has stopped, or one of another process
 * on this machine (same host name) that has exited. A host on another machine is never taken for gone: its record stays
 * (shown by `ops projections status` with its host and pid) until that host resumes, stops or starts again there. The
 * record of a process whose id another process has taken since stays too (rather than hide a pause). Hosts sharing a
 * read store need host names of their own: containers get distinct ones unless one is set.
 */
function gone(record: PauseRecord): boolean {
  if (record.host !== hostname()) return false;
  if (record.pid === process.pid) return !runningHosts.has(record.id);
  try {
    process.kill(record.pid, 0);
    return false;
  } catch (error) {
    // EPERM: it runs, as another user.
    return (error as NodeJS.ErrnoException).code === 'ESRCH';
  }
}

class InlineHost implements ProjectionHost {
  readonly mode = 'inline' as const;
  private stopping = false;
  private constructor(
    private readonly runners: Map<string, ProjectionRunner>,
    private readonly board: HealthBoard,
    private readonly reembedder: Reembedder,
    private readonly pauses: Pauses,
  ) {}

  static async start({ config, events, reads, sinks, log }: HostOptions): Promise<InlineHost> {
    const runners = new Map(allProjections(config, sinks, log).map((p) => [p.name, new ProjectionRunner(p, events, reads, log)]));
    const board = new HealthBoard([...runners.keys()]);
    for (const runner of runners.values()) {
      runner.onProgress((position) => board.moved(runner.name, position));
      runner.onFailure((failure) => board.failed(runner.name, failure));
      await runner.start();
    }
    const pauses = new Pauses(reads, board, log);
    await pauses.clearLeftOver([...runners.keys()]);
    // On the HTTP thread here (no projection thread), holding its event loop while it runs.
    return new InlineHost(runners, board, new Reembedder(config, events, reads, log), pauses);
  }

  health(): HostHealth {
    return { thread: { mode: 'inline', state: 'running', heartbeat_at: null, restarts: 0 }, projections: this.board.list() };
  }

  get names(): string[] { return [...this.runners.keys()]; }
  position(name: string): number { return this.runner(name).currentPosition; }
  waitFor(name: string, position: number, timeoutMs: number, signal?: AbortSignal): Promise<void> { return this.runner(name).waitFor(position, timeoutMs, signal); }

  private runner(name: string): ProjectionRunner {
    const runner = this.runners.get(name);
    if (!runner) throw new Error(`unknown projection ${name}`);
    return runner;
  }

  reembed(older: string[]): void { this.reembedder.start(older); }

  async pause(name: string): Promise<void> {
    const runner = this.controllable(name);
    this.pauses.set(name, true);
    await runner.pause();
    await this.pauses.record(name);
  }

  async resume(name: string): Promise<void> {
    const runner = this.controllable(name);
    this.pauses.set(name, false);
    await runner.resume();
    await this.pauses.record(name);
  }

  private controllable(name: string): ProjectionRunner {
    if (this.stopping) throw new Error('the projections are stopped');
    return this.runner(name);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.reembedder.stop();
    for (const runner of this.runners.values()) await runner.stop();
    await this.pauses.clearAll();
  }
}

/**
 * What the projection thread sends: sink notes first, then positions, applied in that order; failures
 * (null: over) as they change. It sends at least one report every HEARTBEAT_INTERVAL_MS.
 */
export interface HostReport {
  ready?: true;
  stopped?: true;
  notes?: SinkNote[];
  positions?: Record<string, number>;
  failures?: Record<string, ProjectionFailure | null>;
  /** A ControlRequest carried out (or not: `error`). */
  controlled?: { id: number; error?: string };
}

/** What the HTTP thread asks of the projection thread's runner `projection` (see ProjectionHost.pause). */
export interface ControlRequest {
  id: number;
  control: 'pause' | 'resume';
  projection: string;
}
export type SinkNote =
  | { sink: 'keys'; batch: string[] | 'all' }
  | { sink: 'memories' | 'vectors'; batch: unknown[]; generation: number }
  | { sink: 'memories' | 'vectors'; reset: true };

/** How long after an unexpected exit of the projection thread a new one is started. */
const RESTART_DELAY_MS = 1000;
/**
 * How long a stopping projection thread is given (its runners commit the batch being applied and store their
 * checkpoints, then it closes its stores) before it is told to end wherever it is (see THREAD_EXIT_TIMEOUT_MS): an
 * event loop held (by a store call waiting out SQLite's busy timeout on a read store another process holds locked, a
 * slow disk) must not hold the server's stop. Ended, the thread leaves what it had not committed to the next start, as
 * after a crash (each checkpoint commits with its documents).
 */
export const THREAD_STOP_TIMEOUT_MS = 5000;
/**
 * How long a thread told to end (the `abandon` flag) has to reach its next store call or turn of its event loop, where
 * it exits by itself; then it is terminated. Not terminated at once: terminating a thread inside a store call that then
 * fails (SQLITE_BUSY after the 5 s busy timeout, a disk error) aborts the whole process (better-sqlite3 throwing into a
 * terminating thread: `FATAL ERROR: v8::ToLocalChecked Empty MaybeLocal`, exit code 134). Longer than that busy timeout.
 */
export const THREAD_EXIT_TIMEOUT_MS = 10_000;

class ThreadHost implements ProjectionHost {
  readonly mode = 'thread' as const;
  private readonly progress = new EventEmitter();
  private worker: Worker | undefined;
  private stopping = false;
  private readonly board: HealthBoard;
  /** A thread is running: it reported ready and has not exited. */
  private running = false;
  private heardAt = 0;
  private restarts = 0;
  /** Paused projections: a thread started to replace one that exited starts with them paused. */
  private readonly pauses: Pauses;
  /** ControlRequests sent to the running thread, by id, until it answers or exits. */
  private readonly controls = new Map<number, (error?: string) => void>();
  private nextControl = 1;
  /** Set (to 1) when a stopping thread did not stop in time: it then exits at its next safe point (see host-thread.ts). */
  private readonly abandon = new Int32Array(new SharedArrayBuffer(4));

  private constructor(private readonly options: HostOptions, readonly names: readonly string[]) {
    this.progress.setMaxListeners(0);
    this.board = new HealthBoard(names);
    this.pauses = new Pauses(options.reads, this.board, options.log);
  }

  static async start(options: HostOptions): Promise<ThreadHost> {
    const names = allProjections(options.config).map((p) => p.name);
    const host = new ThreadHost(options, names);
    await host.launch();
    await host.pauses.clearLeftOver(names);
    return host;
  }

  private launch(): Promise<void> {
    const { config, sinks, log } = this.options;
    const worker = startWorker(import.meta.url, './host-thread', { config, logLevel: log.level, vectors: sinks.vectors !== undefined, paused: this.pauses.names, abandon: this.abandon });
    this.worker = worker;
    return new Promise((resolve, reject) => {
      let ready = false;
      worker.on('message', (report: HostReport) => {
        this.heardAt = Date.now();
        this.receive(report);
        if (report.ready && !ready) {
          ready = true;
          this.running = true;
          resolve();
        }
      });
      worker.on('error', (error) => {
        log.error({ err: error }, 'projection thread failed');
        if (!ready) reject(error);
      });
      worker.on('exit', (code) => {
        // What it was asked and did not answer, its replacement starts with (`paused`).
        for (const settle of this.controls.values()) settle();
        this.controls.clear();
        if (this.worker !== worker || this.stopping) return;
        this.worker = undefined;
        this.running = false;
        // Before ready the caller (start, or restartLater) decides what happens next.
        if (!ready) {
          reject(new Error(`projection thread exited with code ${code} before it was ready`));
          return;
        }
        log.error({ code }, `projection thread exited; starting a new one in ${RESTART_DELAY_MS} ms`);
        this.restartLater();
      });
    });
  }

  /** Until a new thread is running: a failed start (a store briefly locked or unreachable) is tried again, not left at that. */
  private restartLater(): void {
    setTimeout(() => {
      if (this.stopping) return;
      this.launch().then(() => { this.restarts++; }, (error) => {
        this.options.log.error({ err: error }, `could not restart the projection thread; trying again in ${RESTART_DELAY_MS} ms`);
        this.restartLater();
      });
    }, RESTART_DELAY_MS).unref();
  }

  private receive(report: HostReport): void {
    const { sinks, log } = this.options;
    for (const note of report.notes ?? []) {
      if (note.sink === 'keys') {
        sinks.keys(note.batch);
        continue;
      }
      const sink = note.sink === 'memories' ? sinks.memories : sinks.vectors;
      if (!sink) continue;
      if ('reset' in note) sink.reset().catch((error) => log.error({ err: error, sink: note.sink }, 'could not reload an in-process index'));
      else (sink.afterCommit as (batch: unknown[], generation: number) => void)(note.batch, note.generation);
    }
    // As reported, also when lower: a runner that reloaded (a rebuilt generation swapped in, a new thread)
    // is back at its stored checkpoint, and waits must not pass on the position it had before.
    for (const [name, position] of Object.entries(report.positions ?? {})) {
      this.board.moved(name, position);
      this.progress.emit(name, position);
    }
    for (const [name, failure] of Object.entries(report.failures ?? {})) this.board.failed(name, failure);
    if (report.controlled) {
      this.controls.get(report.controlled.id)?.(report.controlled.error);
      this.controls.delete(report.controlled.id);
    }
  }

  health(): HostHealth {
    const thread = {
      mode: 'thread' as const,
      state: threadState(this.running, this.heardAt, Date.now()),
      heartbeat_at: this.heardAt > 0 ? new Date(this.heardAt).toISOString() : null,
      restarts: this.restarts,
    };
    return { thread, projections: this.board.list() };
  }

  get thread(): Worker | undefined { return this.worker; }

  position(name: string): number {
    if (!this.names.includes(name)) throw new Error(`unknown projection ${name}`);
    return this.board.positionOf(name);
  }

  reembed(older: string[]): void { this.worker?.postMessage({ reembed: older }); }

  pause(name: string): Promise<void> { return this.control('pause', name); }
  resume(name: string): Promise<void> { return this.control('resume', name); }

  /**
   * Notes it in `pauses` (for a thread started later, and health()), asks the running thread, if any, and waits for its
   * answer or its exit; then records it beside the checkpoint.
   */
  private async control(control: ControlRequest['control'], projection: string): Promise<void> {
    if (this.stopping) throw new Error('the projections are stopped');
    if (!this.names.includes(projection)) throw new Error(`unknown projection ${projection}`);
    this.pauses.set(projection, control === 'pause');
    const worker = this.worker;
    if (worker) {
      const id = this.nextControl++;
      await new Promise<void>((resolve, reject) => {
        this.controls.set(id, (error) => (error === undefined ? resolve() : reject(new Error(error))));
        worker.postMessage({ id, control, projection } satisfies ControlRequest);
      });
    }
    await this.pauses.record(projection);
  }

  waitFor(name: string, position: number, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return waitForPosition(this.progress, name, () => this.position(name), name, position, timeoutMs, signal);
  }

  async stop(): Promise<void> {
    this.stopping = true;
    const worker = this.worker;
    if (worker) {
      let exited = false;
      const exit = new Promise<void>((resolve) => worker.once('exit', () => {
        exited = true;
        resolve();
      }));
      const stopped = new Promise<void>((resolve) => worker.on('message', (report: HostReport) => { if (report.stopped) resolve(); }));
      worker.postMessage('stop');
      if (!(await within(Promise.race([stopped, exit]), THREAD_STOP_TIMEOUT_MS))) {
        const { log } = this.options;
        log.warn({ timeout_ms: THREAD_STOP_TIMEOUT_MS },
          'the projection thread did not stop in time (its event loop held: a read store locked by another process, a slow disk): ending it at its next store call; what it had not committed is applied at the next start');
        Atomics.store(this.abandon, 0, 1);
        if (!(await within(exit, THREAD_EXIT_TIMEOUT_MS))) {
          log.warn({ timeout_ms: THREAD_EXIT_TIMEOUT_MS }, 'the projection thread did not end at a store call in time either: terminating it');
        }
      }
      if (!exited) await worker.terminate();
      this.worker = undefined;
    }
    await this.pauses.clearAll();
  }
}

/** Whether `promise` settled within `ms`. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => { timer = setTimeout(() => resolve(false), ms); });
  try {
    return await Promise.race([promise.then(() => true), late]);
  } finally {
    clearTimeout(timer);
  }
}
