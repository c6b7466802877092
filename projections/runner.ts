import { EventEmitter } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EventStore, RecordedEvent } from '../infra/eventstore/port.js';
import type { CheckpointInfo, PauseRecord, ProjectionFailure, ReadStore } from '../infra/readstore/port.js';
import type { Logger } from '../infra/logger.js';
import { describeError, lagOf } from './health.js';
import { projectionFilter, relevantTo, type Projection } from './projection.js';

const BATCH = 500;
/** How long a batch may wait for more events before it is applied. */
const BATCH_WINDOW_MS = 2;
/** How soon a checkpoint advanced only by events this projection ignores is stored. */
const PERSIST_IDLE_CHECKPOINT_MS = 1000;
/**
 * How long a failed runner waits before it retries from its checkpoint, the first time: doubled after each
 * attempt that fails again, up to RETRY_DELAY_MAX_MS, and back to this once the runner is past the failure.
 * While it waits it looks at its stored checkpoint this often, so a rebuild swapped in (or a batch another
 * process applied) is taken up within this time rather than after the whole wait.
 */
const RETRY_DELAY_MS = 1000;
/** The longest wait between retries: a poison event (one that fails every time) is retried once a minute. */
const RETRY_DELAY_MAX_MS = 60_000;
/**
 * The longest wait between retries of a batch that failed on a model provider (embeddings down, a local model server
 * restarting): that heals by itself, and semantic searches wait for the vectors meanwhile, so it is retried sooner.
 */
const PROVIDER_RETRY_DELAY_MAX_MS = 10_000;

/**
 * The wait before the `attempt`th retry in a row: `first`, doubled for each attempt before it, at most `max`, or for a
 * failure of a model provider (a ProviderError) at most PROVIDER_RETRY_DELAY_MAX_MS.
 */
export function retryDelay(attempt: number, error: unknown, first = RETRY_DELAY_MS, max = RETRY_DELAY_MAX_MS): number {
  const cap = isProviderFailure(error) ? Math.min(max, PROVIDER_RETRY_DELAY_MAX_MS) : max;
  return Math.min(cap, first * 2 ** Math.min(attempt - 1, 30));
}
/** A model provider's failure (a ProviderError, told by name: the projection thread's errors cross as plain objects too). */
function isProviderFailure(error: unknown): boolean {
  return (error as Error | undefined)?.name === 'ProviderError';
}

/**
 * How often a runner waiting for events looks at its stored checkpoint. A rebuild swapped in is otherwise found only by
 * the runner's next commit (refused, the checkpoint having moved): soon enough when the rebuilt generation caught up with
 * this runner, but not when this runner's checkpoint lies past the end of the log (restored from an older backup, see
 * readModelsAhead): the rebuilt one is lower, and the events appended from there up to the stale checkpoint never come
 * to this runner's subscription, so it would neither apply them nor commit, and would answer waits for them at once.
 */
const CHECKPOINT_CHECK_MS = 1000;

/** How often a failure that keeps repeating is logged again. */
const REPEAT_LOG_INTERVAL_MS = 60_000;
/**
 * A failure outside a batch (reading the log, reloading the checkpoint, afterCommit; or one recorded
 * before this runner started) has no event whose application would show it over: it is over once the
 * retried subscription has waited this long for events without failing again.
 */
const RECOVERED_AFTER_MS = 10_000;

export class ConsistencyTimeoutError extends Error {
  override readonly name = 'ConsistencyTimeoutError';
  constructor(readonly projection: string, readonly wanted: number, readonly reached: number) {
    super(`read model ${projection} has not reached position ${wanted} yet (at ${reached})`);
  }
}

export interface ProjectionStatus {
  projection: string;
  position: number;
  head: number;
  /** Events after the checkpoint (the log's own events, on EventStoreDB too), counted up to LAG_COUNT_LIMIT. */
  lag: number;
  /** The lag is at least this much: counting stopped at LAG_COUNT_LIMIT. */
  lag_at_least?: true;
  generation: number;
  updated_at: string | null;
  /** As the projection's runner last recorded it (see ReadStore.recordFailure); null when it is not failing. */
  failing: ProjectionFailure | null;
  /** Since when a server process has held the projection paused (see ReadStore.recordPause): the earliest of `paused_by`; null when none does. */
  paused_at: string | null;
  /** Who holds it paused, and since when, earliest first; null when none does. */
  paused_by: PauseRecord[] | null;
  /** The checkpoint lies past the log's end: the read model was built from another or a longer log (see readModelsAhead). */
  ahead: boolean;
}

/**
 * Runs one projection: pulls events after its stored checkpoint, applies each batch and stores the
 * new checkpoint in the same unit of work, then waits for more. If the stored checkpoint moved under
 * it (a rebuild swapped a new generation in), it starts again from the stored one.
 */
export class ProjectionRunner {
  /** Applied (in memory): what waitFor answers from. */
  private position = 0;
  /** Stored checkpoint: batches without relevant events advance `position` only and are stored lazily. */
  private stored = 0;
  private generation = 1;
  private writes: Promise<unknown> = Promise.resolve();
  private persistTimer: NodeJS.Timeout | undefined;
  private moved = false;
  private subscription: AbortController | undefined;
  /** Highest position the subscription reported as read. */
  private scanned = 0;
  /** Events taken from the subscription and not applied yet. */
  private holding = 0;
  private readonly progress = new EventEmitter();
  private abort = new AbortController();
  private loop: Promise<void> | undefined;
  /**
   * Set from a failure until the runner is past it: the batch that failed (from `until`, its first event)
   * applied, or the position moved on; for a failure outside a batch (`batch: false`), also once the retried
   * subscription has run for RECOVERED_AFTER_MS without one.
   */
  private failing: { failure: ProjectionFailure; until: number; batch: boolean } | undefined;
  /** First position of the batch being prepared, applied and committed. */
  private applying: number | undefined;
  private recovery: NodeJS.Timeout | undefined;
  private started = false;
  /** Set while afterCommit runs: a failure there may leave in-process state past the stored checkpoint. */
  private afterCommitFailed = false;
  /** The event whose `apply` threw in the batch that failed: named in the failure, so an operator can find it. */
  private failedEvent: RecordedEvent | undefined;
  /** The failure last logged, and when: a repeat of it is logged again only after REPEAT_LOG_INTERVAL_MS. */
  private logged: { message: string; at: number } | undefined;
  private paused = false;
  /** Attempts in a row that failed in this runner: the wait before the next retry doubles with each (see RETRY_DELAY_MS). */
  private retries = 0;
  /** Pauses and resumes, one after another in the order asked for. */
  private control: Promise<unknown> = Promise.resolve();
  /** The last record of the failure state beside the checkpoint failed: it is written again (see recordFailure). */
  private unrecorded = false;
  private recordAgain: NodeJS.Timeout | undefined;
  /** From stop() to the next start(): a failed record is not tried again later (the store is about to close). */
  private stopping = false;

  constructor(
    readonly projection: Projection,
    private readonly events: EventStore,
    private readonly store: ReadStore,
    private readonly log?: Logger,
    /**
     * `batchWindowMs`: how long a batch waits for more events (default 2 ms). 0 takes only what is already
     * there: for a store that delivers commits in gathered chunks anyway (the projection thread's, which
     * reads announced commits at most every 2 ms), a second window would only add lag.
     * `recoveredAfterMs`: RECOVERED_AFTER_MS; `retryDelayMs`, `retryDelayMaxMs`: RETRY_DELAY_MS and RETRY_DELAY_MAX_MS;
     * `checkpointCheckMs`: CHECKPOINT_CHECK_MS (tests shorten them).
     */
    private readonly options: { batchWindowMs?: number; recoveredAfterMs?: number; retryDelayMs?: number; retryDelayMaxMs?: number; checkpointCheckMs?: number } = {},
  ) {
    this.progress.setMaxListeners(0);
  }

  get name(): string { return this.projection.name; }
  get currentPosition(): number { return this.position; }

  async start(): Promise<void> {
    this.stopping = false;
    await this.store.register(this.projection.name, this.projection.collections);
    await this.reload();
    this.started = true;
    this.loop = this.run();
    this.armRecovery();
  }

  /**
   * From the stored checkpoint. `reset: false` keeps the projection's in-process state (indexes, caches):
   * right after a batch failed before its commit, that state is still the stored checkpoint's (unless another
   * process moved it on meanwhile: then it follows, see followElsewhere), and a reset
   * would make every sink reload in full (the whole BM25 or vector index) once a second while, say, an
   * embeddings provider is down.
   */
  private async reload(options: { reset?: boolean } = {}): Promise<void> {
    const cp = await this.store.checkpoint(this.projection.name);
    // Another process moved this generation on (it won the race for a batch, or committed while this runner
    // retried a failure): in-process state follows the events it committed, rather than reloading in full.
    const movedOn = this.started && cp.generation === this.generation && cp.position > this.stored;
    const followed = movedOn && await this.followElsewhere(this.stored, cp.position);
    this.position = cp.position;
    this.stored = cp.position;
    this.scanned = cp.position;
    this.holding = 0;
    const generation = this.generation;
    this.moved = false;
    const reset = !followed && (options.reset !== false || cp.generation !== generation || movedOn);
    this.generation = cp.generation;
    // A failure recorded by a runner before this one (a projection thread that died, a server restarted
    // while the projection failed) goes on: the same since, counted on; a rebuilt generation starts afresh.
    if (!this.started && cp.failure) {
      this.failing = { failure: cp.failure, until: cp.position + 1, batch: false };
      this.progress.emit('failure', cp.failure);
    } else if (this.failing && (cp.generation !== generation || cp.position >= this.failing.until)) this.recovered();
    if (reset) await this.projection.reset?.();
    // Possibly lower than before (a rebuilt generation went live): whoever mirrors positions must know.
    this.progress.emit('position', this.position);
  }

  /**
   * Hands the projection (committedElsewhere) the events it reads in (`from`, `to`], which another process committed
   * to this generation. False when it has no such hook or it failed (the caller then resets in full).
   */
  private async followElsewhere(from: number, to: number): Promise<boolean> {
    const follow = this.projection.committedElsewhere;
    if (!follow) return false;
    try {
      const events: RecordedEvent[] = [];
      for (let after = from; after < to;) {
        const page = await this.events.readAll(after, { limit: BATCH, filter: projectionFilter(this.projection) });
        events.push(...page.filter((e) => e.position <= to));
        if (page.length < BATCH) break;
        after = page[page.length - 1]!.position;
      }
      if (events.length > 0) await follow.call(this.projection, events, this.generation, this.store);
      return true;
    } catch (error) {
      this.log?.warn({ err: error, projection: this.name }, 'could not follow batches committed by another process; reloading in-process state');
      return false;
    }
  }

  private async run(): Promise<void> {
    while (!this.abort.signal.aborted) {
      try {
        await this.follow();
        if (this.moved && !this.abort.signal.aborted) await this.reload();
      } catch (error) {
        if (this.abort.signal.aborted) {
          // Stopped or paused during a batch (its prepare ended by the signal): nothing of it was written, and it is no failure.
          this.applying = undefined;
          this.failedEvent = undefined;
          return;
        }
        const event = this.failedEvent;
        this.fail(error);
        const { message, count } = this.failing!.failure;
        const wait = retryDelay(++this.retries, error, this.options.retryDelayMs, this.options.retryDelayMaxMs);
        // Retried again and again: the same failure is logged when it starts and then once a minute (with its count),
        // not a stack trace per attempt; a different one at once.
        const now = Date.now();
        const repeat = this.logged?.message === message;
        if (!repeat || now - this.logged!.at >= REPEAT_LOG_INTERVAL_MS) {
          this.logged = { message, at: now };
          this.log?.error({
            err: error, projection: this.name, attempts: count, retry_in_ms: wait,
            ...(event && { event: { position: event.position, id: event.id, type: event.type, stream: event.stream } }),
          }, repeat ? 'projection still failing; retrying from its checkpoint' : 'projection failed; retrying from its checkpoint');
        }
        await this.backOff(wait);
        if (this.abort.signal.aborted) return;
        // Only a failure after a commit (in afterCommit) can have left in-process state past the checkpoint; once reset,
        // it is in line again, and later failures before a commit (a provider down for a while) reset nothing.
        await this.reload({ reset: this.afterCommitFailed }).then(() => { this.afterCommitFailed = false; }, () => undefined);
        this.armRecovery();
      }
    }
  }

  /**
   * Waits `ms` before a retry. Over at once when the runner is stopped or paused (a pause, resume or stop does not
   * wait for it), and within RETRY_DELAY_MS once the stored checkpoint has moved: a rebuild swapped in, or another
   * process applied the batch that failed here; the retry then starts from there.
   */
  private async backOff(ms: number): Promise<void> {
    const { signal } = this.abort;
    const end = performance.now() + ms;
    for (let left = ms; left > 0 && !signal.aborted; left = end - performance.now()) {
      await sleep(Math.min(left, this.options.retryDelayMs ?? RETRY_DELAY_MS), undefined, { signal }).catch(() => undefined);
      if (signal.aborted || performance.now() >= end) return;
      const stored = await this.store.checkpoint(this.name).catch(() => undefined);
      if (stored && (stored.generation !== this.generation || stored.position > this.stored)) return;
    }
  }

  /** One subscription from the current checkpoint; returns when the checkpoint moved elsewhere. */
  private async follow(): Promise<void> {
    // Each subscription has its own signal: ending it releases a pending next(), so return() below is
    // not queued behind a wait for the next append (which would leave us one event late after a swap).
    const local = new AbortController();
    this.subscription = local;
    const stop = () => local.abort();
    this.abort.signal.addEventListener('abort', stop, { once: true });
    // Only the events this projection reads come through; positions passed without one arrive via onPosition.
    const iterator = this.events.subscribeToAll(this.position, {
      signal: local.signal,
      filter: projectionFilter(this.projection),
      onPosition: (position) => this.passed(position),
    })[Symbol.asyncIterator]();
    try {
      let pending: Promise<IteratorResult<RecordedEvent>> | undefined;
      for (;;) {
        const first = await this.nextOrSwapped(pending ?? iterator.next());
        pending = undefined;
        if (first === SWAPPED) {
          this.moved = true;
          return;
        }
        if (first.done) return;
        const batch: RecordedEvent[] = [first.value];
        this.holding = 1;
        let ended = false;
        // Take what arrives within a short window, up to one batch: under load one read-model commit
        // then covers many commands, at the cost of at most the window of extra lag.
        const window = delay(this.options.batchWindowMs ?? BATCH_WINDOW_MS);
        while (batch.length < BATCH) {
          const next = iterator.next();
          const result = await Promise.race([next, window]);
          if (result === IDLE) {
            pending = next;
            break;
          }
          if (result.done) {
            ended = true;
            break;
          }
          batch.push(result.value);
          this.holding = batch.length;
        }
        if (!(await this.applyBatch(batch))) {
          await this.reload();
          return;
        }
        this.holding = 0;
        this.passed(this.scanned);
        if (ended) return;
        // Catching up, every read and apply can complete without waiting for I/O, so this loop would run
        // on microtasks alone and starve the event loop (requests, timers, messages) until it caught up.
        if (batch.length === BATCH) await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      local.abort();
      this.abort.signal.removeEventListener('abort', stop);
      await iterator.return?.();
    }
  }

  /**
   * `next`, or SWAPPED once another generation of this projection went live (a rebuild swapped in) while it waited: the
   * stored checkpoint is looked at every CHECKPOINT_CHECK_MS of the wait (a read store that fails to answer is looked at
   * again next time; a failing runner does this in backOff).
   */
  private async nextOrSwapped(next: Promise<IteratorResult<RecordedEvent>>): Promise<IteratorResult<RecordedEvent> | typeof SWAPPED> {
    // One reaction on `next`, however long it waits (a projection whose events are rare waits for days): a
    // Promise.race per check would add one to it every check, all held until an event comes.
    let settled = false;
    let wake: (() => void) | undefined;
    const settle = () => {
      settled = true;
      wake?.();
    };
    next.then(settle, settle);
    while (!settled && !this.abort.signal.aborted) {
      let timer: NodeJS.Timeout | undefined;
      await new Promise<void>((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, this.options.checkpointCheckMs ?? CHECKPOINT_CHECK_MS);
      });
      clearTimeout(timer);
      wake = undefined;
      if (settled || this.abort.signal.aborted) break;
      const stored = await this.store.checkpoint(this.name).catch(() => undefined);
      if (stored && stored.generation !== this.generation) return SWAPPED;
    }
    return next;
  }

  private async applyBatch(batch: RecordedEvent[]): Promise<boolean> {
    if (this.moved) return false;
    const relevant = relevantTo(this.projection, batch);
    const last = batch[batch.length - 1]!.position;
    if (relevant.length === 0) {
      // Nothing to write: advance in memory now, store the checkpoint with the next write or within a second.
      this.advance(last);
      this.schedulePersist();
      return true;
    }
    this.applying = relevant[0]!.position;
    this.failedEvent = undefined;
    await this.projection.prepare?.(relevant, this.events, this.store, this.abort.signal);
    const ok = await this.commit(last, async (writer) => {
      for (const event of relevant) {
        try {
          await this.projection.apply(event, writer);
        } catch (error) {
          this.failedEvent = event;
          throw error;
        }
      }
    });
    this.applying = undefined;
    if (!ok) return false;
    this.afterCommitFailed = true;
    this.projection.afterCommit?.(relevant, this.generation);
    this.afterCommitFailed = false;
    this.advance(last);
    return true;
  }

  /**
   * The subscription has read up to `position` and handed over every event of ours before it. Once
   * those are applied (none held), the projection is at `position` too.
   */
  private passed(position: number): void {
    if (position > this.scanned) this.scanned = position;
    if (this.holding > 0 || this.moved || this.scanned <= this.position) return;
    this.advance(this.scanned);
    this.schedulePersist();
  }

  private advance(position: number): void {
    this.position = position;
    this.progress.emit('position', position);
    if (this.failing && position >= this.failing.until) this.recovered();
  }

  /**
   * Counts a failure: the batch being applied, if that is where it happened, has to be applied to end it. An event
   * whose `apply` threw is named by type and position (not by stream: /readyz is public, and stream names carry ids).
   */
  private fail(error: unknown): void {
    const now = new Date().toISOString();
    const previous = this.failing?.failure;
    const event = this.failedEvent;
    const message = describeError(error) + (event ? ` (applying ${event.type} at position ${event.position})` : '');
    const failure: ProjectionFailure = {
      message, since: previous?.since ?? now, count: (previous?.count ?? 0) + 1, last_at: now,
      ...(isProviderFailure(error) ? { provider: true } : {}),
    };
    const batch = this.applying;
    this.applying = undefined;
    this.failedEvent = undefined;
    this.failing = { failure, until: batch ?? this.position + 1, batch: batch !== undefined };
    this.reportFailure(failure);
  }

  private recovered(): void {
    if (this.failing) this.log?.info({ projection: this.name, attempts: this.failing.failure.count, since: this.failing.failure.since }, 'projection recovered');
    this.failing = undefined;
    this.logged = undefined;
    this.retries = 0;
    clearTimeout(this.recovery);
    this.reportFailure(null);
  }

  /** Tells the host, and records it beside the checkpoint (queued with the commits) for other processes. */
  private reportFailure(failure: ProjectionFailure | null): void {
    this.progress.emit('failure', failure);
    this.recordFailure();
  }

  /**
   * Records the failure state beside the checkpoint as it is when the write's turn comes. A write that fails (the read
   * store busy or unreachable for a moment) is tried again a second later, until one succeeds: `ops projections
   * status` would otherwise show a failure that is over, or none for one going on, until the state changed again.
   */
  private recordFailure(): void {
    clearTimeout(this.recordAgain);
    this.recordAgain = undefined;
    this.writes = this.writes.then(() => this.store.recordFailure(this.name, this.failing?.failure ?? null)).then(
      () => { this.unrecorded = false; },
      (error: unknown) => {
        if (!this.unrecorded) this.log?.warn({ err: error, projection: this.name }, 'could not record the projection\'s failure state beside its checkpoint; trying again');
        this.unrecorded = true;
        if (this.stopping || this.recordAgain) return;
        // A second later, whatever the wait before the batch's next attempt (up to a minute).
        this.recordAgain = setTimeout(() => this.recordFailure(), RETRY_DELAY_MS);
        this.recordAgain.unref();
      },
    );
  }

  /** For a failure outside a batch: over once the subscription has waited for events, holding none, for RECOVERED_AFTER_MS. */
  private armRecovery(): void {
    const failing = this.failing;
    if (!failing || failing.batch) return;
    clearTimeout(this.recovery);
    this.recovery = setTimeout(() => {
      if (this.failing === failing && this.holding === 0 && this.applying === undefined && !this.abort.signal.aborted) this.recovered();
    }, this.options.recoveredAfterMs ?? RECOVERED_AFTER_MS);
    this.recovery.unref();
  }

  /**
   * Writes through the store one at a time, with the stored checkpoint as the expected one. `position`
   * may be decided when the write's turn comes (the idle checkpoint: a batch queued before it may store
   * a later one); a checkpoint never moves back.
   */
  private commit(at: number | (() => number), fn: Parameters<ReadStore['applyBatch']>[3]): Promise<boolean> {
    const run = this.writes.then(async () => {
      const position = typeof at === 'function' ? at() : at;
      if (position <= this.stored) return true;
      const ok = await this.store.applyBatch(this.name, { position: this.stored, generation: this.generation }, position, fn);
      if (ok) this.stored = position;
      else {
        // Another process moved the checkpoint (a rebuild was swapped in): end the subscription to reload.
        this.moved = true;
        this.subscription?.abort();
      }
      return ok;
    });
    this.writes = run.catch(() => undefined);
    return run;
  }

  private schedulePersist(): void {
    if (this.persistTimer) return;
    this.persistTimer = setTimeout(() => {
      this.persistTimer = undefined;
      void this.persist();
    }, PERSIST_IDLE_CHECKPOINT_MS);
    this.persistTimer.unref();
  }

  private async persist(): Promise<void> {
    if (this.position <= this.stored || this.moved) return;
    await this.commit(() => (this.moved ? this.stored : this.position), async () => undefined).catch((error) => this.log?.warn({ err: error, projection: this.name }, 'could not store checkpoint'));
  }

  /** Resolves once this projection has applied everything up to `position`; bounded by `timeoutMs`, or ended by `signal`. */
  waitFor(position: number, timeoutMs: number, signal?: AbortSignal): Promise<void> {
    return waitForPosition(this.progress, 'position', () => this.position, this.name, position, timeoutMs, signal);
  }

  /** Calls `listener` with each new applied position. */
  onProgress(listener: (position: number) => void): void {
    this.progress.on('position', listener);
  }

  /** Calls `listener` when the runner starts failing, fails again (counted), or is past its failure (null). */
  onFailure(listener: (failure: ProjectionFailure | null) => void): void {
    this.progress.on('failure', listener);
  }

  /** Set while the runner retries after an error. */
  get failure(): ProjectionFailure | undefined { return this.failing?.failure; }

  /**
   * Stops applying events until resume() (see ProjectionHost.pause): a batch being applied is committed first,
   * and the checkpoint stored (one still in its prepare, waiting on a provider that takes the signal, is dropped and
   * prepared again on resume). Pausing a paused runner does nothing.
   */
  pause(): Promise<void> {
    return this.serially(async () => {
      if (this.paused) return;
      this.paused = true;
      await this.halt();
    });
  }

  /** Starts a paused runner again from its stored checkpoint; resuming one that is not paused does nothing. */
  resume(): Promise<void> {
    return this.serially(async () => {
      if (!this.paused) return;
      await this.start();
      this.paused = false;
    });
  }

  get isPaused(): boolean { return this.paused; }

  private serially(step: () => Promise<void>): Promise<void> {
    const run = this.control.then(step);
    this.control = run.catch(() => undefined);
    return run;
  }

  /**
   * A batch being applied is committed first (one still in its prepare is dropped, as by pause), and the checkpoint
   * stored (with the failure state, if its last record failed: one more try); after any pause or resume asked for before.
   */
  stop(): Promise<void> {
    return this.serially(async () => {
      this.stopping = true;
      await this.halt();
      clearTimeout(this.recordAgain);
      this.recordAgain = undefined;
    });
  }

  private async halt(): Promise<void> {
    this.abort.abort();
    await this.loop;
    clearTimeout(this.recovery);
    clearTimeout(this.persistTimer);
    this.persistTimer = undefined;
    await this.persist();
    if (this.unrecorded) this.recordFailure();
    await this.writes;
    this.abort = new AbortController();
  }
}

/**
 * Resolves once `current()` has reached `position`, told by `event`s of `progress` carrying the new
 * position; ConsistencyTimeoutError for projection `name` after `timeoutMs`. An aborted `signal` (the
 * client that asked has gone) rejects at once with its reason and releases the listener and the timer.
 */
export function waitForPosition(
  progress: EventEmitter, event: string, current: () => number, name: string, position: number, timeoutMs: number, signal?: AbortSignal,
): Promise<void> {
  if (current() >= position) return Promise.resolve();
  if (signal?.aborted) return Promise.reject(signal.reason);
  return new Promise((resolve, reject) => {
    const onProgress = (p: number) => {
      if (p < position) return;
      cleanup();
      resolve();
    };
    const timer = setTimeout(() => {
      cleanup();
      reject(new ConsistencyTimeoutError(name, position, current()));
    }, timeoutMs);
    const onAbort = () => {
      cleanup();
      reject(signal!.reason);
    };
    const cleanup = () => {
      clearTimeout(timer);
      progress.off(event, onProgress);
      signal?.removeEventListener('abort', onAbort);
    };
    progress.on(event, onProgress);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

const IDLE = Symbol('idle');
const SWAPPED = Symbol('swapped');
function delay(ms: number): Promise<typeof IDLE> {
  if (ms <= 0) return new Promise((resolve) => setImmediate(() => resolve(IDLE)));
  return new Promise((resolve) => setTimeout(() => resolve(IDLE), ms));
}

/** Where `projections status` stops counting a projection's lag (reading that many events from EventStoreDB takes a moment). */
export const LAG_COUNT_LIMIT = 100_000;

export async function projectionStatus(events: EventStore, store: ReadStore): Promise<ProjectionStatus[]> {
  const list = await store.listCheckpoints();
  // Read after the checkpoints: a node appending and projecting meanwhile cannot make one look ahead.
  const [head, end] = [await events.headPosition(), await events.endPosition()];
  return Promise.all(list.map(async (cp) => ({
    projection: cp.projection,
    position: cp.position,
    head,
    ...(await lagOf(events, cp.position, head, LAG_COUNT_LIMIT)),
    generation: cp.generation,
    updated_at: cp.updated_at,
    failing: cp.failure ?? null,
    paused_at: cp.paused_at ?? null,
    paused_by: cp.paused_by ?? null,
    ahead: cp.position > end,
  })));
}
